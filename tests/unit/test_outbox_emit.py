"""outbox.emit in every idempotent body, on the in-memory store: ids, atomicity, the limit."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyConfig,
    IdempotencyConfigError,
    InMemoryPersistenceLayer,
    idempotent,
    idempotent_function,
)
from idempotent_lambda._outbox_format import event_id, item_key, slot
from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.adapters.dynamodb_stream import idempotent_stream_handler
from idempotent_lambda.adapters.kafka import idempotent_kafka_handler
from idempotent_lambda.adapters.kinesis import idempotent_kinesis_handler
from idempotent_lambda.adapters.sqs import idempotent_sqs_handler
from idempotent_lambda.exceptions import IdempotencyTransactionError
from idempotent_lambda.outbox import MAX_EVENTS, emit
from idempotent_lambda.testing import (
    ManualClock,
    api_gateway_http_event,
    dynamodb_stream_event,
    kafka_event,
    kinesis_event,
    sqs_event,
)
from idempotent_lambda.transaction import current_transaction

CONFIG = IdempotencyConfig(event_key_jmespath="order_id")


def test_slots_and_event_ids_are_a_stored_format() -> None:
    """A claim and position give one slot, an item key one id, forever (never regenerate)."""
    assert "9e847fbc-973b-53ae-bd92-df69cf8f29e5" == slot("owner-1", 0)
    key = item_key("local.f#abc", slot("owner-1", 0))
    assert "local.f#abc#outbox#9e847fbc-973b-53ae-bd92-df69cf8f29e5" == key
    assert "5e7b0339-ee14-578e-b4df-bbb5177582da" == event_id({"id": {"S": key}})
    assert "706451f1-26ca-5941-a374-916ac979593d" == event_id({"pk": {"S": "p"}, "sk": {"S": key}})


def test_an_event_id_cannot_be_computed_from_the_request_alone() -> None:
    """Two claims of one key (the first's record expired) emit different ids, both committed."""
    clock = ManualClock()
    store = InMemoryPersistenceLayer(clock=clock)
    config = IdempotencyConfig(event_key_jmespath="order_id", expires_after_seconds=60)

    @idempotent(persistence_store=store, config=config)
    def handler(event: dict[str, Any], context: Any) -> str:
        return emit("A", {})

    first = handler({"order_id": "1"}, None)
    assert first == handler({"order_id": "1"}, None)  # a replay: no body, no event
    clock.advance(61)
    second = handler({"order_id": "1"}, None)
    assert first != second
    assert [first, second] == [e.event_id for e in store.outbox_events]


def test_a_body_that_raised_emits_nothing_and_its_rerun_emits_new_ids() -> None:
    """Events commit with the record only; a rerun is a new claim, so new ids; a replay adds
    none."""
    store = InMemoryPersistenceLayer()
    attempts: list[list[str]] = []

    @idempotent(persistence_store=store, config=CONFIG)
    def handler(event: dict[str, Any], context: Any) -> list[str]:
        ids = [
            emit("A", {"n": 1}),
            emit("B", {"n": Decimal("2.5")}, source="s", event_bus_name="b"),
        ]
        attempts.append(ids)
        if len(attempts) == 1:
            raise RuntimeError("after emitting")
        return ids

    with pytest.raises(RuntimeError):
        handler({"order_id": "1"}, None)
    assert [] == store.outbox_events
    first = handler({"order_id": "1"}, None)
    assert first == handler({"order_id": "1"}, None)
    assert attempts[1] == first != attempts[0]
    events = store.outbox_events
    assert first == [e.event_id for e in events]
    assert [("A", "idempotent_lambda.outbox", None), ("B", "s", "b")] == [
        (e.detail_type, e.source, e.event_bus_name) for e in events
    ]
    assert {"n": 2.5} == json.loads(events[1].detail)


def test_another_key_gets_other_ids() -> None:
    """Two requests never share an event id."""
    store = InMemoryPersistenceLayer()

    @idempotent(persistence_store=store, config=CONFIG)
    def handler(event: dict[str, Any], context: Any) -> str:
        return emit("A", {})

    assert handler({"order_id": "1"}, None) != handler({"order_id": "2"}, None)


def test_emit_outside_an_idempotent_body_is_a_config_error() -> None:
    """Nothing is running: nowhere to write the event."""
    with pytest.raises(IdempotencyConfigError, match="inside a function decorated"):
        emit("A", {})


@pytest.mark.parametrize(
    ("detail", "message"),
    [
        ([1], "must be a mapping"),
        ({"outbox": 1}, "reserved"),
        ({"x": float("nan")}, "JSON cannot carry"),
        ({"x": b"bytes"}, "JSON cannot carry"),
        ({"x": "y" * 256 * 1024}, "EventBridge takes at most"),
    ],
)
def test_a_detail_eventbridge_cannot_take_is_refused_in_the_body(detail: Any, message: str) -> None:
    """Bad input raises where it is emitted, and nothing is written."""
    store = InMemoryPersistenceLayer()

    @idempotent(persistence_store=store, config=CONFIG)
    def handler(event: dict[str, Any], context: Any) -> None:
        emit("A", detail)

    with pytest.raises(IdempotencyTransactionError, match=message):
        handler({"order_id": "1"}, None)
    assert [] == store.committed_writes
    assert store.get_many(["x"]) == {}


@pytest.mark.parametrize(
    ("detail_type", "source", "message"),
    [
        ("D" * 129, None, "detail_type is 129 characters"),
        ("D", "s" * 257, "source is 257 characters"),
        ("D", "aws.orders", "AWS's own"),
    ],
)
def test_a_name_eventbridge_never_accepts_is_refused_in_the_body(
    detail_type: str, source: str | None, message: str
) -> None:
    """Over 128 characters of detail type, 256 of source, or an aws. source: refused at once."""
    store = InMemoryPersistenceLayer()

    @idempotent(persistence_store=store, config=CONFIG)
    def handler(event: dict[str, Any], context: Any) -> None:
        emit(detail_type, {}, source=source)

    with pytest.raises(IdempotencyTransactionError, match=message):
        handler({"order_id": "1"}, None)
    assert [] == store.committed_writes


def test_the_longest_names_eventbridge_accepts_are_taken() -> None:
    """128 characters of detail type and 256 of source are EventBridge's own limits."""
    store = InMemoryPersistenceLayer()

    @idempotent(persistence_store=store, config=CONFIG)
    def handler(event: dict[str, Any], context: Any) -> str:
        return emit("D" * 128, {}, source="s" * 256)

    assert handler({"order_id": "1"}, None) == store.outbox_events[0].event_id


def test_an_event_is_refused_when_the_publisher_s_trace_context_would_make_it_too_large() -> None:
    """An entry is sized with the id and the 72 bytes a traced publisher adds."""
    store = InMemoryPersistenceLayer()

    @idempotent(persistence_store=store, config=CONFIG)
    def handler(event: dict[str, Any], context: Any) -> str:
        return emit("A", {"x": "y" * event["fill"]}, source="s")

    # time (14) + source + type + the detail with its id: the fill that reaches 256 KB exactly
    overhead = 14 + 1 + 1 + len('{"x":"","outbox":{"id":"' + "0" * 36 + '"}}')
    full = 256 * 1024 - overhead
    assert handler({"order_id": "1", "fill": full - 72}, None)
    with pytest.raises(IdempotencyTransactionError, match="may add 72 more"):
        handler({"order_id": "2", "fill": full - 71}, None)


def test_a_body_may_emit_99_events_less_its_own_writes() -> None:
    """The emit that would be write 100 raises; a refused emit takes no position."""
    store = InMemoryPersistenceLayer()

    @idempotent(persistence_store=store, config=CONFIG)
    def handler(event: dict[str, Any], context: Any) -> list[str]:
        current_transaction().put("orders", {"pk": "1"})
        ids = [emit("Line", {"n": n}) for n in range(MAX_EVENTS - 1)]
        with pytest.raises(IdempotencyTransactionError, match="at most 99 events"):
            emit("Line", {"n": "one too many"})
        return ids

    ids = handler({"order_id": "1"}, None)
    assert 99 == MAX_EVENTS
    assert ids == [e.event_id for e in store.outbox_events]
    assert 100 - 1 == len(store.committed_writes)


def test_a_result_the_adapter_does_not_store_emits_nothing() -> None:
    """An HTTP 5xx is not stored: its events are dropped with its writes."""
    store = InMemoryPersistenceLayer()

    @idempotent_http(persistence_store=store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        emit("A", {})
        return {"statusCode": 503, "body": ""}

    event = api_gateway_http_event()
    event["headers"]["idempotency-key"] = "k-1"
    assert 503 == handler(event, None)["statusCode"]
    assert [] == store.outbox_events


def test_an_unrecorded_body_still_commits_its_events_with_random_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Idempotency switched off: the events still commit, atomically with the writes."""
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "true")
    store = InMemoryPersistenceLayer()

    @idempotent(persistence_store=store, config=CONFIG)
    def handler(event: dict[str, Any], context: Any) -> str:
        return emit("A", {})

    first, second = handler({"order_id": "1"}, None), handler({"order_id": "1"}, None)
    assert first != second
    assert [first, second] == [e.event_id for e in store.outbox_events]


def test_an_unrecorded_body_writes_its_events_under_its_own_key_prefix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No record: the item lies under the function's key prefix, inside its grant."""
    store = InMemoryPersistenceLayer()

    @idempotent(persistence_store=store, config=CONFIG, key_prefix="orders.create")
    def handler(event: dict[str, Any], context: Any) -> str:
        return emit("A", {})

    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "true")
    handler({"order_id": "1"}, None)
    monkeypatch.delenv("IDEMPOTENCY_DISABLED")
    handler({}, None)  # no key in the payload
    keys = [w["Put"]["Item"]["id"]["S"] for w in store.committed_writes]
    assert 2 == len(keys)
    assert all(k.startswith("orders.create#outbox#") for k in keys), keys


def test_nested_and_async_bodies_emit_under_their_own_records() -> None:
    """An inner idempotent function's events commit with its own record; async works alike."""
    store = InMemoryPersistenceLayer()

    @idempotent_function(data_keyword_argument="order", persistence_store=store, config=CONFIG)
    def inner(order: dict[str, Any]) -> str:
        return emit("Inner", {})

    @idempotent(persistence_store=store, config=CONFIG)
    async def handler(event: dict[str, Any], context: Any) -> list[str]:
        return [emit("Outer", {}), inner(order={"order_id": "inner"})]

    outer_id, inner_id = asyncio.run(handler({"order_id": "1"}, None))
    assert [inner_id, outer_id] == [e.event_id for e in store.outbox_events]


def test_a_store_without_an_outbox_is_refused() -> None:
    """A store that cannot commit the event with the record says so in the body."""

    class NoOutbox(InMemoryPersistenceLayer):
        outbox_put = None  # type: ignore[assignment]

    store = NoOutbox()

    @idempotent(persistence_store=store, config=CONFIG)
    def handler(event: dict[str, Any], context: Any) -> None:
        emit("A", {})

    with pytest.raises(IdempotencyTransactionError, match="keeps no outbox"):
        handler({"order_id": "1"}, None)


ADAPTERS = {
    "sqs": (idempotent_sqs_handler, lambda: sqs_event(records=[{"body": "a"}, {"body": "b"}])),
    "dynamodb_stream": (
        idempotent_stream_handler,
        lambda: {"Records": dynamodb_stream_event()["Records"] * 1},
    ),
    "kinesis": (idempotent_kinesis_handler, kinesis_event),
    "kafka": (idempotent_kafka_handler, kafka_event),
}


@pytest.mark.parametrize("adapter", list(ADAPTERS))
def test_every_batch_adapter_emits_per_record_and_a_redelivery_emits_nothing(adapter: str) -> None:
    """Each record's events commit with its record; the batch again replays without events."""
    decorate, make_event = ADAPTERS[adapter]
    store = InMemoryPersistenceLayer()

    @decorate(persistence_store=store)
    def handler(record: Any, context: Any) -> str:
        return emit("Seen", {"adapter": adapter})

    event = make_event()
    assert {"batchItemFailures": []} == handler(event, None)
    emitted = [e.event_id for e in store.outbox_events]
    records = event.get("Records") or [r for part in event["records"].values() for r in part]
    assert len(records) == len(emitted) > 0
    assert len(set(emitted)) == len(emitted)
    assert {"batchItemFailures": []} == handler(event, None)
    assert emitted == [e.event_id for e in store.outbox_events]


def test_a_durable_step_emits_once_across_the_execution() -> None:
    """durable.step: the step's events commit with its record, once per execution."""
    pytest.importorskip("aws_durable_execution_sdk_python")
    runner = pytest.importorskip("aws_durable_execution_sdk_python_testing.runner")
    from aws_durable_execution_sdk_python import DurableContext, durable_execution

    from idempotent_lambda import durable

    store = InMemoryPersistenceLayer()

    @durable_execution
    def handler(event: dict[str, Any], context: DurableContext) -> list[str]:
        def charge(_: Any) -> str:
            return emit("Charged", {"amount": event["amount"]})

        first = durable.step(context, charge, name="charge", persistence_store=store)
        again = durable.step(context, charge, name="charge-again", persistence_store=store)
        return [first, again]

    with runner.DurableFunctionTestRunner(handler=handler, invocation_timeout=900) as r:
        result = r.run(input=json.dumps({"amount": 5}), execution_timeout=120, execution_name="e")
    ids = json.loads(result.result)
    assert ids == [e.event_id for e in store.outbox_events]
    assert 2 == len(set(ids))


def test_an_outbox_key_starts_with_its_record_key_and_is_never_a_record_key() -> None:
    """LeadingKeys on '<prefix>#*' covers it; no '<prefix>#<hex digest>' key matches it."""
    from idempotent_lambda._outbox_format import is_outbox_key

    key = item_key("orders.create#" + "ab" * 32, slot("owner", 0))
    assert key.startswith("orders.create#")
    assert is_outbox_key(key)
    assert is_outbox_key(item_key("orders.create", slot("owner", 0)))
    assert not is_outbox_key("orders.create#" + "ab" * 32)
    assert not is_outbox_key("outbox#" + "ab" * 16)  # a key_prefix of "outbox", hex digest


def test_a_fifo_group_run_ahead_and_behind_commits_each_records_events_with_it() -> None:
    """Claims ahead, completions behind (the batch pipeline): events still ride each record."""
    store = InMemoryPersistenceLayer()
    messages = [
        {"body": json.dumps({"n": n}), "message_group_id": "g", "message_id": f"m-{n}"}
        for n in range(5)
    ]

    @idempotent_sqs_handler(persistence_store=store)
    def handler(record: Any, context: Any) -> str:
        return emit("Seen", {"n": record.json_body["n"]})

    event = sqs_event(records=messages)
    assert {"batchItemFailures": []} == handler(event, None)
    assert list(range(5)) == [json.loads(e.detail)["n"] for e in store.outbox_events]
    assert {"batchItemFailures": []} == handler(event, None)
    assert 5 == len(store.outbox_events)


class _Crash(BaseException):
    """An error the durable SDK does not know: the invocation ends, the execution goes on."""


def test_a_durable_body_run_again_under_its_claim_emits_the_same_ids() -> None:
    """The claim lives across the execution's invocations: the body's second run (the first
    crashed, keeping the claim) emits the ids the first run got, and they commit once."""
    pytest.importorskip("aws_durable_execution_sdk_python")
    runner = pytest.importorskip("aws_durable_execution_sdk_python_testing.runner")
    from aws_durable_execution_sdk_python import durable_execution

    store = InMemoryPersistenceLayer()
    runs: list[list[str]] = []

    @idempotent(persistence_store=store, config=CONFIG)
    def body(event: dict[str, Any], context: Any) -> list[str]:
        runs.append([emit("A", {}), emit("B", {})])
        if len(runs) == 1:
            raise _Crash
        return runs[-1]

    handler = durable_execution(body)

    def runtime(event: Any, context: Any) -> Any:
        try:
            return handler(event, context)
        except _Crash as exc:  # the Lambda runtime reports it as the invocation's error
            raise RuntimeError("the runtime stopped the invocation") from exc

    with runner.DurableFunctionTestRunner(handler=runtime) as r:
        result = r.run(input=json.dumps({"order_id": "o-1"}), execution_timeout=120)
    assert 2 == len(runs)
    assert runs[0] == runs[1] == json.loads(result.result)
    assert runs[1] == [e.event_id for e in store.outbox_events]
