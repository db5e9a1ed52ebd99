import asyncio

import pytest

from idempotent_lambda import IdempotencyAlreadyInProgressError


@pytest.fixture
def orders(idempotency_dynamodb_table, import_handler, monkeypatch):
    monkeypatch.setenv("IDEMPOTENCY_TABLE", idempotency_dynamodb_table)
    return import_handler("async_orders")


@pytest.fixture
def reserved(orders, monkeypatch):
    calls = []
    go = asyncio.Event()
    go.set()  # a test clears it to hold the first call inside its side effect

    async def reserve_stock(order_id):
        calls.append(order_id)
        await go.wait()
        return f"res_{order_id}"

    monkeypatch.setattr(orders, "reserve_stock", reserve_stock)  # the side effect, recorded
    return calls, go


def test_a_retry_replays_the_first_result(orders, reserved, lambda_context):
    calls, _ = reserved
    first = orders.handler({"order_id": "o-1"}, lambda_context)
    assert orders.handler({"order_id": "o-1"}, lambda_context) == first  # Lambda's retry
    assert calls == ["o-1"]


def test_a_duplicate_awaited_on_the_same_loop_is_refused(orders, reserved, lambda_context):
    calls, go = reserved
    go.clear()
    event = {"order_id": "o-2"}

    async def two_deliveries():
        tasks = [asyncio.create_task(orders.process(event, lambda_context)) for _ in range(2)]
        # One task holds the claim and waits inside reserve_stock; the other is answered.
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        go.set()
        return await asyncio.gather(*tasks, return_exceptions=True)

    results = asyncio.run(two_deliveries())
    assert {"order_id": "o-2", "reservation": "res_o-2"} in results
    assert any(isinstance(r, IdempotencyAlreadyInProgressError) for r in results)
    assert calls == ["o-2"]
