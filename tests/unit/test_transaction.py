"""Transactional completion on the in-memory store: the API, its binding and its failure rules."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyAlreadyInProgressError,
    IdempotencyConfig,
    IdempotencyUnstorableResultError,
    InMemoryPersistenceLayer,
    Status,
    idempotent,
    idempotent_function,
)
from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler
from idempotent_lambda.exceptions import (
    CancellationReason,
    IdempotencyError,
    IdempotencyTransactionConflictError,
    IdempotencyTransactionError,
)
from idempotent_lambda.persistence.base import TransactionalStore, TransactItem
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from idempotent_lambda.transaction import (
    MAX_TRANSACTION_WRITES,
    Transaction,
    current_transaction,
)
from tests.events import http_events as ev
from tests.unit._doubles import Decisions, SpyStore

CONFIG = IdempotencyConfig(event_key_jmespath="order_id")
ORDER_PUT = {
    "Put": {
        "TableName": "orders",
        "Item": {"pk": {"S": "order#7"}, "total": {"N": "9.90"}},
        "ConditionExpression": "attribute_not_exists(pk)",
    }
}


def order_handler(store: Any, *, config: IdempotencyConfig = CONFIG) -> Any:
    """Return a handler that writes the order item through the transaction."""

    @idempotent(persistence_store=store, config=config, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        current_transaction().put(
            "orders",
            {"pk": f"order#{event['order_id']}", "total": Decimal("9.90")},
            condition="attribute_not_exists(pk)",
        )
        return {"order_id": event["order_id"]}

    return handler


def record_of(store: InMemoryPersistenceLayer, handler_key_material: int) -> Any:
    """Return the stored record of the order handler for this order id."""
    from idempotent_lambda._identity import digest

    return store.get(f"orders#{digest(CONFIG, handler_key_material)}")


def test_writes_commit_with_the_completed_record(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The queued put commits, in the low-level form, together with the COMPLETED record."""
    handler = order_handler(idempotency_store)

    result = handler({"order_id": 7}, lambda_context)

    assert {"order_id": 7} == result
    assert [ORDER_PUT] == idempotency_store.committed_writes
    assert Status.COMPLETED == record_of(idempotency_store, 7).status


def test_a_replay_commits_nothing_again(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A retry replays the result; the writes were made once."""
    handler = order_handler(idempotency_store)

    handler({"order_id": 7}, lambda_context)
    replayed = handler({"order_id": 7}, lambda_context)

    assert {"order_id": 7} == replayed
    assert 1 == len(idempotency_store.committed_writes)


def test_a_committed_transaction_fills_the_local_cache(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """With the local cache on, the record committed with the writes replays without the store."""
    handler = order_handler(
        idempotency_store,
        config=IdempotencyConfig(event_key_jmespath="order_id", use_local_cache=True),
    )
    first = handler({"order_id": 7}, lambda_context)
    idempotency_store.clear()  # only the cache can answer now

    assert first == handler({"order_id": 7}, lambda_context)
    assert (0, []) == (len(idempotency_store), idempotency_store.committed_writes)


def test_every_operation_in_document_form_is_converted() -> None:
    """Put, Update, Delete and ConditionCheck take Python values and queue DynamoDB's form."""

    class Table:
        name = "stock"

    transaction = Transaction(InMemoryPersistenceLayer())
    transaction.put("orders", {"pk": "o", "lines": [1, {"sku": "a"}], "tags": {"x"}, "b": b"1"})
    transaction.update(
        Table(),
        {"sku": "a"},
        "SET #q = #q - :n",
        condition="#q >= :n",
        names={"#q": "qty"},
        values={":n": 2},
        return_old_on_failure=True,
    )
    transaction.delete("carts", {"id": "c1"}, condition="attribute_exists(id)")
    transaction.condition_check("customers", {"id": "u1"}, "attribute_exists(id)")

    assert [
        {
            "Put": {
                "Item": {
                    "pk": {"S": "o"},
                    "lines": {"L": [{"N": "1"}, {"M": {"sku": {"S": "a"}}}]},
                    "tags": {"SS": ["x"]},
                    "b": {"B": b"1"},
                },
                "TableName": "orders",
            }
        },
        {
            "Update": {
                "Key": {"sku": {"S": "a"}},
                "UpdateExpression": "SET #q = #q - :n",
                "TableName": "stock",
                "ConditionExpression": "#q >= :n",
                "ExpressionAttributeNames": {"#q": "qty"},
                "ExpressionAttributeValues": {":n": {"N": "2"}},
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        },
        {
            "Delete": {
                "Key": {"id": {"S": "c1"}},
                "TableName": "carts",
                "ConditionExpression": "attribute_exists(id)",
            }
        },
        {
            "ConditionCheck": {
                "Key": {"id": {"S": "u1"}},
                "TableName": "customers",
                "ConditionExpression": "attribute_exists(id)",
            }
        },
    ] == list(transaction.writes)
    assert 4 == len(transaction)


def test_boto3_condition_objects_become_expressions() -> None:
    """A ``boto3.dynamodb.conditions`` condition is built into expression, names and values."""
    from boto3.dynamodb.conditions import Attr

    transaction = Transaction(InMemoryPersistenceLayer())
    transaction.put("orders", {"pk": "o"}, condition=Attr("pk").not_exists() | Attr("v").lt(3))

    (write,) = transaction.writes
    assert {
        "TableName": "orders",
        "Item": {"pk": {"S": "o"}},
        "ConditionExpression": "(attribute_not_exists(#n0) OR #n1 < :v0)",
        "ExpressionAttributeNames": {"#n0": "pk", "#n1": "v"},
        "ExpressionAttributeValues": {":v0": {"N": "3"}},
    } == write["Put"]


def test_a_placeholder_clash_with_a_condition_object_is_refused() -> None:
    """User placeholders may not collide with the ones a condition object generates."""
    from boto3.dynamodb.conditions import Attr

    transaction = Transaction(InMemoryPersistenceLayer())
    with pytest.raises(IdempotencyTransactionError, match="placeholder"):
        transaction.update(
            "t", {"k": 1}, "SET a = :v0", condition=Attr("a").eq(1), values={":v0": 2}
        )


def test_low_level_writes_are_queued_as_given() -> None:
    """``add`` takes the client's TransactItems form."""
    transaction = Transaction(InMemoryPersistenceLayer())

    transaction.add(ORDER_PUT)

    assert [ORDER_PUT] == list(transaction.writes)


@pytest.mark.parametrize(
    "write",
    [
        {},
        {"Put": {"TableName": "t"}, "Delete": {"TableName": "t"}},
        {"Upsert": {"TableName": "t"}},
        {"Put": "not a mapping"},
        {"Put": {"Item": {}}},
        "Put",
    ],
)
def test_malformed_low_level_writes_are_refused(write: Any) -> None:
    """A low-level write must be one known operation with a table name."""
    with pytest.raises(IdempotencyTransactionError):
        Transaction(InMemoryPersistenceLayer()).add(write)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda t: t.put("orders", {"pk": "o", "price": 9.9}), "Decimal"),
        (lambda t: t.put("orders", {"pk": object()}), "cannot store"),
        (lambda t: t.put("orders", ["not", "a", "mapping"]), "mapping"),
        (lambda t: t.put("", {"pk": "o"}), "table"),
        (lambda t: t.put(object(), {"pk": "o"}), "table"),
        (lambda t: t.update("orders", {"pk": "o"}, ""), "update expression"),
        (lambda t: t.condition_check("orders", {"pk": "o"}, None), "needs a condition"),
        (lambda t: t.delete("orders", {"pk": "o"}, condition=42), "condition must be"),
    ],
)
def test_unusable_arguments_raise_a_typed_error(call: Any, match: str) -> None:
    """Bad input is refused as it is queued, with a message that names the problem."""
    with pytest.raises(IdempotencyTransactionError, match=match):
        call(Transaction(InMemoryPersistenceLayer()))


def test_messages_never_contain_the_values() -> None:
    """A value DynamoDB cannot store is not echoed in the error message."""
    with pytest.raises(IdempotencyTransactionError) as caught:
        Transaction(InMemoryPersistenceLayer()).put("t", {"secret": 1.5})

    assert "1.5" not in str(caught.value)


def test_current_transaction_outside_an_idempotent_body_raises() -> None:
    """Called where no idempotent body runs: a clear typed error."""
    with pytest.raises(IdempotencyTransactionError, match="only inside"):
        current_transaction()
    assert issubclass(IdempotencyTransactionError, IdempotencyError)


def test_the_transaction_is_closed_once_the_body_returns(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A transaction kept past its body refuses new writes, and the binding is gone."""
    kept: list[Transaction] = []

    @idempotent(persistence_store=idempotency_store, config=CONFIG)
    def handler(event: dict[str, Any], context: Any) -> int:
        kept.append(current_transaction())
        return 1

    handler({"order_id": 1}, lambda_context)

    with pytest.raises(IdempotencyTransactionError, match="closed"):
        kept[0].put("orders", {"pk": "late"})
    with pytest.raises(IdempotencyTransactionError):
        current_transaction()


def test_write_number_100_is_refused_inside_the_body(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """99 business writes fit with the record; the 100th raises where it is queued."""
    queued: list[int] = []

    @idempotent(persistence_store=idempotency_store, config=CONFIG)
    def handler(event: dict[str, Any], context: Any) -> int:
        transaction = current_transaction()
        for n in range(event["writes"]):
            transaction.put("orders", {"pk": str(n)})
            queued.append(n)
        return len(transaction)

    assert 99 == MAX_TRANSACTION_WRITES
    assert 99 == handler({"order_id": 1, "writes": 99}, lambda_context)
    with pytest.raises(IdempotencyTransactionError, match="at most 99"):
        handler({"order_id": 2, "writes": 100}, lambda_context)
    assert 99 == len(idempotency_store.committed_writes)
    assert record_of(idempotency_store, 2) is None  # released: a retry runs again


def test_a_store_checks_the_limit_too(idempotency_store: InMemoryPersistenceLayer) -> None:
    """Writes that bypass `Transaction` are still held to the limit."""
    with pytest.raises(IdempotencyTransactionError):
        idempotency_store.write_transaction([ORDER_PUT] * 100)


def test_a_raising_body_discards_its_writes(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The body raised: nothing is committed and the record is released."""

    @idempotent(persistence_store=idempotency_store, config=CONFIG, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> int:
        current_transaction().add(ORDER_PUT)
        raise ValueError("payment declined")

    with pytest.raises(ValueError, match="payment declined"):
        handler({"order_id": 7}, lambda_context)

    assert [] == idempotency_store.committed_writes
    assert record_of(idempotency_store, 7) is None


def test_a_business_conflict_surfaces_typed_and_releases_the_record(
    idempotency_clock: ManualClock, lambda_context: FakeLambdaContext, decisions: Decisions
) -> None:
    """A failed business condition: typed error with reasons, nothing written, retry runs again."""
    conflict = IdempotencyTransactionConflictError(
        "order exists",
        reasons=(CancellationReason(0, "Put", "orders", "ConditionalCheckFailed"),),
    )
    fail = [True]

    def apply_writes(writes: Sequence[TransactItem]) -> None:
        if fail[0]:
            raise conflict

    store = InMemoryPersistenceLayer(clock=idempotency_clock, apply_writes=apply_writes)
    handler = order_handler(store, config=IdempotencyConfig(**_with_hook(decisions)))

    with pytest.raises(IdempotencyTransactionConflictError) as caught:
        handler({"order_id": 7}, lambda_context)

    assert caught.value is conflict
    assert ("ConditionalCheckFailed",) == tuple(r.code for r in caught.value.failed)
    assert [] == store.committed_writes
    assert ["RELEASED"] == decisions.outcomes
    assert "IdempotencyTransactionConflictError" == decisions.last.error
    fail[0] = False
    assert {"order_id": 7} == handler({"order_id": 7}, lambda_context)
    assert 1 == len(store.committed_writes)


def test_a_lost_lease_writes_nothing_and_says_so(
    idempotency_store: InMemoryPersistenceLayer,
    idempotency_clock: ManualClock,
    decisions: Decisions,
) -> None:
    """Taken over while the body ran: LEASE_LOST, nothing committed, in-progress error."""
    config = IdempotencyConfig(**_with_hook(decisions))

    @idempotent(persistence_store=idempotency_store, config=config, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> int:
        current_transaction().add(ORDER_PUT)
        if event.get("slow"):
            idempotency_clock.advance(seconds=5)
            handler({"order_id": 7}, FakeLambdaContext(30_000, clock=idempotency_clock))
        return 1

    with pytest.raises(IdempotencyAlreadyInProgressError, match="nothing was written"):
        handler({"order_id": 7, "slow": True}, FakeLambdaContext(2_000, clock=idempotency_clock))

    assert [ORDER_PUT] == idempotency_store.committed_writes  # the taker-over's only
    assert ["TAKEN_OVER", "LEASE_LOST"] == decisions.outcomes


def test_an_unstorable_result_commits_nothing(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """All or nothing: no marker, the writes are left out, and the error says nothing was done.

    (Not `IdempotencyUnstorableResultError`, which tells the batch adapters the record is done.)
    """

    @idempotent(persistence_store=idempotency_store, config=CONFIG, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> object:
        current_transaction().add(ORDER_PUT)
        return object()

    with pytest.raises(IdempotencyTransactionError, match="nothing was written") as caught:
        handler({"order_id": 7}, lambda_context)

    assert isinstance(caught.value.__cause__, IdempotencyUnstorableResultError)

    assert [] == idempotency_store.committed_writes
    assert record_of(idempotency_store, 7) is None


def test_a_store_without_the_capability_is_refused_as_writes_queue(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A store that cannot commit business writes says so inside the body."""
    store = SpyStore(idempotency_store)
    assert not isinstance(store, TransactionalStore)

    @idempotent(persistence_store=store, config=CONFIG)
    def handler(event: dict[str, Any], context: Any) -> int:
        current_transaction().add(ORDER_PUT)
        return 1

    with pytest.raises(IdempotencyTransactionError, match="SpyStore cannot commit"):
        handler({"order_id": 7}, lambda_context)
    assert 1 == store.calls["release"]


def test_nested_functions_have_their_own_transaction(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """An inner idempotent function commits its writes with its own record."""
    seen: list[Transaction] = []

    @idempotent_function(
        data_keyword_argument="line", persistence_store=idempotency_store, config=CONFIG
    )
    def reserve(line: dict[str, Any]) -> str:
        seen.append(current_transaction())
        current_transaction().put("stock", {"sku": line["sku"]})
        return "reserved"

    @idempotent(persistence_store=idempotency_store, config=CONFIG)
    def handler(event: dict[str, Any], context: Any) -> str:
        outer = current_transaction()
        outer.put("orders", {"pk": "o1"})
        result = reserve(line={"order_id": 2, "sku": "a"})
        assert current_transaction() is outer
        seen.append(outer)
        return result

    assert "reserved" == handler({"order_id": 1}, lambda_context)

    assert seen[0] is not seen[1]
    tables = [write["Put"]["TableName"] for write in idempotency_store.committed_writes]
    assert ["stock", "orders"] == tables  # the inner one commits first, when it returns


def test_async_handlers_get_their_transaction(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """``async def`` bodies, and tasks they start, see the invocation's transaction."""

    @idempotent(persistence_store=idempotency_store, config=CONFIG)
    async def handler(event: dict[str, Any], context: Any) -> int:
        async def write(n: int) -> None:
            await asyncio.sleep(0)
            current_transaction().put("orders", {"pk": str(n)})

        await asyncio.gather(write(1), write(2))
        return 2

    assert 2 == asyncio.run(handler({"order_id": 1}, lambda_context))
    assert 2 == len(idempotency_store.committed_writes)


def test_a_thread_sees_the_transaction_only_with_a_copied_context(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Context variables do not cross into a plain thread; ``copy_context().run`` carries them."""
    errors: list[BaseException] = []

    @idempotent(persistence_store=idempotency_store, config=CONFIG)
    def handler(event: dict[str, Any], context: Any) -> int:
        def plain() -> None:
            try:
                current_transaction()
            except IdempotencyTransactionError as exc:
                errors.append(exc)

        thread = threading.Thread(target=plain)
        thread.start()
        thread.join()
        copied = contextvars.copy_context()
        thread = threading.Thread(target=copied.run, args=(current_transaction().add, ORDER_PUT))
        thread.start()
        thread.join()
        return 1

    handler({"order_id": 1}, lambda_context)

    assert 1 == len(errors)
    assert [ORDER_PUT] == idempotency_store.committed_writes


@pytest.mark.parametrize("is_async", [False, True])
def test_with_idempotency_disabled_the_writes_still_commit(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    monkeypatch: pytest.MonkeyPatch,
    is_async: bool,
) -> None:
    """``IDEMPOTENCY_DISABLED``: no record, but the queued writes commit, atomically."""
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "true")

    def body() -> int:
        current_transaction().add(ORDER_PUT)
        return 1

    if is_async:

        @idempotent(persistence_store=idempotency_store, config=CONFIG)
        async def async_handler(event: dict[str, Any], context: Any) -> int:
            return body()

        assert 1 == asyncio.run(async_handler({"order_id": 1}, lambda_context))
    else:

        @idempotent(persistence_store=idempotency_store, config=CONFIG)
        def handler(event: dict[str, Any], context: Any) -> int:
            return body()

        assert 1 == handler({"order_id": 1}, lambda_context)

    assert [ORDER_PUT] == idempotency_store.committed_writes
    assert 0 == len(idempotency_store)


def test_without_a_key_the_writes_still_commit(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """No key material (keys optional): the body runs unrecorded and its writes commit."""

    @idempotent(persistence_store=idempotency_store, config=CONFIG)
    def handler(event: dict[str, Any], context: Any) -> int:
        current_transaction().add(ORDER_PUT)
        return 1

    handler({"no_order_id": True}, lambda_context)

    assert [ORDER_PUT] == idempotency_store.committed_writes


def test_each_sqs_record_has_its_own_transaction(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """In a batch, a failing record's writes are discarded; the others commit."""

    @idempotent_sqs_handler(persistence_store=idempotency_store)
    def handle(record: SQSRecord, context: Any) -> str:
        current_transaction().put("orders", {"pk": record.message_id})
        if record.body == "bad":
            raise ValueError("bad record")
        return record.message_id

    event = {"Records": [_sqs("m1", "good"), _sqs("m2", "bad"), _sqs("m3", "good")]}

    response = handle(event, lambda_context)

    assert [{"itemIdentifier": "m2"}] == response["batchItemFailures"]
    keys = [write["Put"]["Item"]["pk"]["S"] for write in idempotency_store.committed_writes]
    assert ["m1", "m3"] == sorted(keys)  # each record is a lane of its own: any order


def test_a_batch_record_whose_transaction_fails_is_retried(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Unstorable result or conflict after the body: the record is reported failed, not done."""

    @idempotent_sqs_handler(persistence_store=idempotency_store)
    def handle(record: SQSRecord, context: Any) -> object:
        current_transaction().put("orders", {"pk": record.message_id})
        return object() if record.body == "unstorable" else "ok"

    event = {"Records": [_sqs("m1", "unstorable"), _sqs("m2", "good")]}

    response = handle(event, lambda_context)

    assert [{"itemIdentifier": "m1"}] == response["batchItemFailures"]
    assert [{"S": "m2"}] == [w["Put"]["Item"]["pk"] for w in idempotency_store.committed_writes]


def test_http_writes_commit_for_stored_responses_only(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A stored (2xx) response commits its writes; a 5xx, which is not stored, discards them."""

    @idempotent_http(persistence_store=idempotency_store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        current_transaction().put("orders", {"pk": event["body"]})
        return {"statusCode": 201 if event["body"] == "ok" else 503, "body": ""}

    created = handler(ev.make_event("apigateway-v2", key="k1", body="ok"), lambda_context)
    failed = handler(ev.make_event("apigateway-v2", key="k2", body="down"), lambda_context)
    replayed = handler(ev.make_event("apigateway-v2", key="k1", body="ok"), lambda_context)

    assert (201, 503, 201) == (
        created["statusCode"],
        failed["statusCode"],
        replayed["statusCode"],
    )
    assert [{"S": "ok"}] == [w["Put"]["Item"]["pk"] for w in idempotency_store.committed_writes]


def test_clear_forgets_committed_writes(idempotency_store: InMemoryPersistenceLayer) -> None:
    """``clear`` resets the record of committed writes too."""
    idempotency_store.write_transaction([ORDER_PUT])

    idempotency_store.clear()

    assert [] == idempotency_store.committed_writes


def _with_hook(decisions: Decisions) -> dict[str, Any]:
    return {"event_key_jmespath": "order_id", "decision_hook": decisions}


def _sqs(message_id: str, body: str) -> dict[str, Any]:
    return {
        "messageId": message_id,
        "receiptHandle": "r",
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": "1545082649183",
            "SenderId": "AIDAIENQZJOLO23YVJ4VO",
            "ApproximateFirstReceiveTimestamp": "1545082649185",
        },
        "messageAttributes": {},
        "md5OfBody": "0",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
        "awsRegion": "us-east-1",
    }
