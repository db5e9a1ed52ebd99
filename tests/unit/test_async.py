"""What only ``async def`` functions have: tasks on one loop, waiting without blocking it.

The record lifecycle itself runs for ``def`` and ``async def`` alike in ``test_lifecycle.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyAlreadyInProgressError,
    IdempotencyConfig,
    IdempotencyUnstorableResultError,
    InMemoryPersistenceLayer,
    idempotent,
    idempotent_function,
)
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests.unit._doubles import Decisions, Runs, SpyStore, lease_end_ms

EVENT = {"order_id": 7}


def test_async_function_payload_and_result(idempotency_store: InMemoryPersistenceLayer) -> None:
    """``idempotent_function`` on ``async def`` finds the payload and replays the result."""
    runs = Runs()

    @idempotent_function(data_keyword_argument="order", persistence_store=idempotency_store)
    async def process(order: dict[str, Any]) -> int:
        return runs(order)

    async def main() -> list[int]:
        return [await process(EVENT), await process(order=EVENT), await process({"order_id": 8})]

    assert [1, 1, 2] == asyncio.run(main())


def test_async_unstorable_result(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """An async body's unstorable result raises now and on retries, without running again."""
    runs = Runs()

    @idempotent(persistence_store=idempotency_store)
    async def handler(event: dict[str, Any], context: Any) -> object:
        runs(event)
        return object()

    for _ in range(2):
        with pytest.raises(IdempotencyUnstorableResultError):
            asyncio.run(handler(EVENT, lambda_context))

    assert 1 == runs.count


def test_async_in_progress_without_wait(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Without wait mode a concurrent async duplicate raises in-progress."""
    runs = Runs()
    inside = asyncio.Event()
    release = asyncio.Event()

    @idempotent(persistence_store=idempotency_store)
    async def handler(event: dict[str, Any], context: Any) -> int:
        run = runs(event)
        inside.set()
        await release.wait()
        return run

    async def main() -> BaseException | None:
        first = asyncio.create_task(handler(EVENT, lambda_context))
        await inside.wait()
        try:
            await handler(EVENT, lambda_context)
        except IdempotencyAlreadyInProgressError as exc:
            return exc
        finally:
            release.set()
            await first
        return None

    assert isinstance(asyncio.run(main()), IdempotencyAlreadyInProgressError)
    assert 1 == runs.count


def test_async_wait_does_not_block_the_event_loop(decisions: Decisions) -> None:
    """While a duplicate waits, other tasks keep running; then it gets the first result."""
    store = SpyStore(InMemoryPersistenceLayer())
    runs = Runs()
    config = IdempotencyConfig(wait_for_in_progress_seconds=60, decision_hook=decisions)

    async def main() -> tuple[Any, Any, int]:
        inside = asyncio.Event()
        release = asyncio.Event()

        @idempotent(persistence_store=store, config=config)
        async def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
            run = runs(event)
            if run == 1:
                inside.set()
                await release.wait()
            return {"run": run}

        first = asyncio.create_task(handler(EVENT, FakeLambdaContext(120_000)))
        await inside.wait()
        waiter = asyncio.create_task(handler(EVENT, FakeLambdaContext(120_000)))
        ticks = 0
        while store.calls["get"] < 3:  # the waiter polls; this loop runs meanwhile
            ticks += 1
            await asyncio.sleep(0.005)
        release.set()
        return await asyncio.wait_for(first, 60), await asyncio.wait_for(waiter, 60), ticks

    first, waited, ticks = asyncio.run(main())

    assert {"run": 1} == first
    assert first == waited
    assert 1 == runs.count
    assert ticks > 0
    assert ["CLAIMED", "REPLAYED"] == decisions.outcomes


def test_async_nested_function_sees_the_handler_context(
    idempotency_clock: ManualClock, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """An async function awaited inside an async handler leases until the handler's deadline."""
    store = SpyStore(idempotency_store)

    @idempotent_function(data_keyword_argument="item", persistence_store=store)
    async def reserve(item: str) -> str:
        return item

    @idempotent(persistence_store=store)
    async def handler(event: dict[str, Any], context: Any) -> str:
        return await reserve("a")

    asyncio.run(handler(EVENT, FakeLambdaContext(9_000, clock=idempotency_clock)))

    nested = store.claims[1]
    assert 0 <= idempotency_clock.now_ms() + 9_000 - lease_end_ms(nested) <= 1000


def test_async_local_cache_replays_without_the_store(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
) -> None:
    """Async functions share the cache rules: filled from the store's replay, then read first."""
    store = SpyStore(idempotency_store)
    config = IdempotencyConfig(use_local_cache=True, decision_hook=decisions)

    def make() -> Any:
        @idempotent(persistence_store=store, config=config, key_prefix="cached")
        async def handler(event: dict[str, Any], context: Any) -> str:
            return "done"

        return handler

    first, other_instance = make(), make()  # separate caches, one store

    async def main() -> list[str]:
        return [
            await first(EVENT, lambda_context),  # claims and completes
            await other_instance(EVENT, lambda_context),  # its cache is empty: from the store
            await other_instance(EVENT, lambda_context),  # now from its cache
            await first(EVENT, lambda_context),  # from the cache filled on completion
        ]

    assert ["done"] * 4 == asyncio.run(main())
    assert {"claim": 2, "complete": 1} == dict(store.calls)
    assert ["CLAIMED", "REPLAYED", "REPLAYED", "REPLAYED"] == decisions.outcomes
    assert ["store", "cache", "cache"] == [d.source for d in decisions.items[1:]]
