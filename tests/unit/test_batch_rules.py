"""Rules every batch adapter shares: time budget, concurrency, context, async, bad events."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyConfig,
    IdempotencyConfigError,
    IdempotencyError,
    InMemoryPersistenceLayer,
    idempotent_function,
)
from idempotent_lambda._lambda_context import current_lambda_context
from idempotent_lambda.adapters.dynamodb_stream import (
    DynamoDBStreamRecord,
    idempotent_stream_handler,
)
from idempotent_lambda.adapters.sqs import (
    MalformedEventError,
    SQSRecord,
    idempotent_sqs_handler,
)
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests.unit._doubles import Decisions, SpyStore

ARN = "arn:aws:sqs:us-east-1:123456789012:orders"
FIFO_ARN = "arn:aws:sqs:us-east-1:123456789012:orders.fifo"
#: How long a thread waits for the others: only a hang exhausts it, however loaded the machine.
WAIT_S = 60


def message(
    message_id: str, body: Any = "{}", *, arn: str = ARN, group: str | None = None
) -> dict[str, Any]:
    """Return a minimal well-formed SQS record."""
    attributes = {"ApproximateReceiveCount": "1"}
    if group is not None:
        attributes["MessageGroupId"] = group
    return {
        "messageId": message_id,
        "receiptHandle": "handle",
        "body": body if isinstance(body, str) else json.dumps(body),
        "attributes": attributes,
        "messageAttributes": {},
        "eventSource": "aws:sqs",
        "eventSourceARN": arn,
    }


def batch(*records: Any) -> dict[str, Any]:
    """Return an event holding ``records``."""
    return {"Records": list(records)}


def failed(response: Mapping[str, Any]) -> list[str]:
    """Return the reported identifiers, in order."""
    return [failure["itemIdentifier"] for failure in response["batchItemFailures"]]


# --- time budget -------------------------------------------------------------------------------


def test_time_budget_stops_the_batch_and_reports_the_rest(
    idempotency_store: InMemoryPersistenceLayer,
    idempotency_clock: ManualClock,
    lambda_context: FakeLambdaContext,
) -> None:
    """No record starts with less than the margin left; the unstarted rest is reported.

    Sequential, so which records start is exact (test_batch_concurrency covers lanes).
    """
    seen: list[str] = []

    @idempotent_sqs_handler(
        persistence_store=idempotency_store, time_safety_margin_ms=5_000, max_concurrency=1
    )
    def handler(record: SQSRecord, context: Any) -> None:
        seen.append(record.message_id)
        idempotency_clock.advance(seconds=10)

    event = batch(*(message(f"m-{n}") for n in range(5)))
    assert ["m-3", "m-4"] == failed(handler(event, lambda_context))
    assert ["m-0", "m-1", "m-2"] == seen


def test_time_budget_check_can_be_turned_off_and_needs_a_context(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Margin 0 never stops; without a Lambda context there is no budget to check."""
    seen: list[str] = []

    @idempotent_sqs_handler(persistence_store=idempotency_store, time_safety_margin_ms=0)
    def handler(record: SQSRecord, context: Any) -> None:
        seen.append(record.message_id)

    lambda_context.set_remaining_ms(0)
    assert [] == failed(handler(batch(message("m-1")), lambda_context))

    @idempotent_sqs_handler(persistence_store=idempotency_store, time_safety_margin_ms=10**9)
    def local(record: SQSRecord, context: Any) -> None:
        seen.append(record.message_id)

    assert [] == failed(local(batch(message("m-2")), None))
    assert ["m-1", "m-2"] == seen


def test_record_lease_is_the_invocation_remaining_time(
    idempotency_store: InMemoryPersistenceLayer,
    idempotency_clock: ManualClock,
    lambda_context: FakeLambdaContext,
) -> None:
    """Each record's claim lasts until the Lambda deadline, not the default 900 s."""
    spy = SpyStore(idempotency_store)

    @idempotent_sqs_handler(persistence_store=spy)
    def handler(record: SQSRecord, context: Any) -> None:
        return None

    handler(batch(message("m-1")), lambda_context)
    deadline = idempotency_clock.now_ms() + lambda_context.get_remaining_time_in_millis()
    assert deadline == spy.claims[0].in_progress_expiry_timestamp


# --- Lambda context ----------------------------------------------------------------------------


def test_lambda_context_is_bound_during_the_batch_and_reset_after(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Nested idempotent functions see the batch's context; nothing stays bound afterwards."""
    seen: list[Any] = []

    @idempotent_function(data_keyword_argument="order", persistence_store=idempotency_store)
    def charge(order: dict[str, Any]) -> int:
        seen.append(current_lambda_context.get())
        return 1

    @idempotent_sqs_handler(persistence_store=idempotency_store)
    def handler(record: SQSRecord, context: Any) -> int:
        seen.append(context)
        return charge(order=record.json_body)

    assert [] == failed(handler(batch(message("m-1", {"id": 1})), lambda_context))
    assert [lambda_context, lambda_context] == seen
    assert current_lambda_context.get() is None


# --- concurrency -------------------------------------------------------------------------------


def test_standard_queue_runs_records_concurrently_with_the_context_bound(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Four records meet at a barrier (impossible one by one); each worker sees the context."""
    barrier = threading.Barrier(4, timeout=WAIT_S)
    contexts: list[Any] = []

    @idempotent_sqs_handler(persistence_store=idempotency_store, max_concurrency=4)
    def handler(record: SQSRecord, context: Any) -> str:
        barrier.wait()
        contexts.append(current_lambda_context.get())
        return threading.current_thread().name

    event = batch(*(message(f"m-{n}") for n in range(8)))
    assert [] == failed(handler(event, lambda_context))
    assert [lambda_context] * 8 == contexts


def test_concurrent_failures_are_reported_in_batch_order(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Standard queue, concurrent: every record attempted, failures listed in batch order."""
    seen: set[str] = set()
    lock = threading.Lock()

    @idempotent_sqs_handler(persistence_store=idempotency_store, max_concurrency=8)
    def handler(record: SQSRecord, context: Any) -> None:
        with lock:
            seen.add(record.message_id)
        if int(record.message_id[2:]) % 3 == 0:
            raise ValueError("refused")

    event = batch(*(message(f"m-{n}") for n in range(20)))
    assert [f"m-{n}" for n in range(0, 20, 3)] == failed(handler(event, lambda_context))
    assert {f"m-{n}" for n in range(20)} == seen


def test_same_key_twice_in_a_concurrent_batch_runs_once_and_the_second_replays(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Records sharing a key share a lane: the second replays the first's result."""
    decisions = Decisions()
    config = IdempotencyConfig(
        event_key_jmespath="powertools_json(body).order_id", decision_hook=decisions
    )
    runs: list[str] = []

    @idempotent_sqs_handler(persistence_store=idempotency_store, config=config, max_concurrency=2)
    def handler(record: SQSRecord, context: Any) -> None:
        runs.append(record.message_id)

    event = batch(message("m-1", {"order_id": 9}), message("m-2", {"order_id": 9}))
    assert [] == failed(handler(event, lambda_context))
    assert ["m-1"] == runs
    assert ["CLAIMED", "REPLAYED"] == decisions.outcomes


def test_fifo_runs_message_groups_concurrently_keeping_order_inside_each(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The first records of two groups meet at a barrier; each group runs in its order."""
    barrier = threading.Barrier(2, timeout=WAIT_S)
    order: dict[str, list[str]] = {"a": [], "b": []}

    @idempotent_sqs_handler(persistence_store=idempotency_store, max_concurrency=4)
    def handler(record: SQSRecord, context: Any) -> None:
        group = record.message_group_id
        assert group is not None
        if not order[group]:
            barrier.wait()
        order[group].append(record.message_id)

    records = [message(f"{g}-{n}", arn=FIFO_ARN, group=g) for n in range(3) for g in "ab"]
    assert [] == failed(handler(batch(*records), lambda_context))
    assert {"a": ["a-0", "a-1", "a-2"], "b": ["b-0", "b-1", "b-2"]} == order


def test_fifo_concurrent_failure_skips_the_rest_of_its_group_and_stops_new_starts(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A failure in one group: its later records never run; nothing is reported that ran OK."""
    ran: list[str] = []
    lock = threading.Lock()

    @idempotent_sqs_handler(persistence_store=idempotency_store, max_concurrency=2)
    def handler(record: SQSRecord, context: Any) -> None:
        with lock:
            ran.append(record.message_id)
        if record.message_id == "a-1":
            raise RuntimeError("refused")

    records = [message(f"{g}-{n}", arn=FIFO_ARN, group=g) for n in range(4) for g in "ab"]
    reported = failed(handler(batch(*records), lambda_context))
    assert {"a-1", "a-2", "a-3"} <= set(reported)
    assert "a-2" not in ran
    assert "a-3" not in ran
    assert [r["messageId"] for r in records if r["messageId"] in reported] == reported
    for identifier in reported:
        assert identifier == "a-1" or identifier not in ran
    b_ran = [m for m in ran if m.startswith("b")]
    assert [f"b-{n}" for n in range(len(b_ran))] == b_ran


def test_fifo_ignores_concurrency_within_one_group(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A single message group runs strictly in order even with max_concurrency."""
    seen: list[str] = []

    @idempotent_sqs_handler(persistence_store=idempotency_store, max_concurrency=8)
    def handler(record: SQSRecord, context: Any) -> None:
        seen.append(record.message_id)
        if record.message_id == "m-4":
            raise RuntimeError("refused")

    records = [message(f"m-{n}", arn=FIFO_ARN, group="g") for n in range(8)]
    assert [f"m-{n}" for n in range(4, 8)] == failed(handler(batch(*records), lambda_context))
    assert [f"m-{n}" for n in range(5)] == seen


# --- async record handlers ---------------------------------------------------------------------


def test_async_record_handler_runs_once_per_key_and_replays(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """``async def`` handlers work; the batch handler stays synchronous."""
    seen: list[str] = []

    @idempotent_sqs_handler(persistence_store=idempotency_store)
    async def handler(record: SQSRecord, context: Any) -> str:
        await asyncio.sleep(0)
        seen.append(record.message_id)
        if record.message_id == "m-2":
            raise RuntimeError("refused")
        return record.message_id

    event = batch(message("m-1"), message("m-2"), message("m-3"))
    assert ["m-2"] == failed(handler(event, lambda_context))
    assert ["m-2"] == failed(handler(event, lambda_context))
    # Each record is a lane of its own (tasks may interleave): compare each batch as a set.
    assert ["m-1", "m-2", "m-3"] == sorted(seen[:3])
    assert ["m-2"] == seen[3:]


def test_async_record_handlers_run_concurrently(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """With max_concurrency, async handlers overlap (they meet at a barrier) and see the context."""
    contexts: list[Any] = []
    state: dict[str, Any] = {}

    async def meet(parties: int) -> None:
        """Wait until ``parties`` handlers have arrived (``asyncio.Barrier``, which 3.10 lacks)."""
        condition = state.setdefault("condition", asyncio.Condition())
        async with condition:
            generation = state.setdefault("generation", 0)
            state["arrived"] = state.get("arrived", 0) + 1
            if state["arrived"] == parties:
                state["arrived"], state["generation"] = 0, generation + 1
                condition.notify_all()
            else:
                await condition.wait_for(lambda: state["generation"] != generation)

    @idempotent_sqs_handler(persistence_store=idempotency_store, max_concurrency=3)
    async def handler(record: SQSRecord, context: Any) -> None:
        await asyncio.wait_for(meet(3), WAIT_S)
        contexts.append(current_lambda_context.get())

    assert [] == failed(handler(batch(*(message(f"m-{n}") for n in range(6))), lambda_context))
    assert [lambda_context] * 6 == contexts


def test_async_batch_called_inside_a_running_loop_still_works(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Called from async code (a test, a local runner), the batch runs on its own loop."""

    @idempotent_sqs_handler(persistence_store=idempotency_store)
    async def handler(record: SQSRecord, context: Any) -> str:
        return record.message_id

    async def caller() -> dict[str, Any]:
        return dict(handler(batch(message("m-1")), lambda_context))

    assert {"batchItemFailures": []} == asyncio.run(caller())


def test_async_stream_handler_stops_the_item_at_its_first_failure(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Ordered sources keep their rule for async handlers too (one item: one chain)."""
    seen: list[str] = []

    @idempotent_stream_handler(persistence_store=idempotency_store)
    async def handler(record: DynamoDBStreamRecord, context: Any) -> None:
        seen.append(record.sequence_number)
        if record.sequence_number == "2":
            raise RuntimeError("refused")

    records = [
        {
            "eventID": str(n),
            "eventName": "INSERT",
            "dynamodb": {"Keys": {"id": {"N": "7"}}, "SequenceNumber": str(n)},
        }
        for n in range(1, 5)
    ]
    assert ["2", "3", "4"] == failed(handler(batch(*records), lambda_context))
    assert ["1", "2"] == seen


# --- switches and bad input --------------------------------------------------------------------


@pytest.mark.parametrize("variable", ["IDEMPOTENCY_DISABLED", "POWERTOOLS_IDEMPOTENCY_DISABLED"])
def test_disabled_idempotency_runs_every_record_without_the_store(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    monkeypatch: pytest.MonkeyPatch,
    decisions: Decisions,
    variable: str,
) -> None:
    """Switched off: no store call, every delivery runs, failures are still reported."""
    monkeypatch.setenv(variable, "true")
    spy = SpyStore(idempotency_store)
    seen: list[str] = []

    @idempotent_sqs_handler(
        persistence_store=spy, config=IdempotencyConfig(decision_hook=decisions)
    )
    def handler(record: SQSRecord, context: Any) -> None:
        seen.append(record.message_id)
        if record.message_id == "m-2":
            raise RuntimeError("refused")

    event = batch(message("m-1"), message("m-2"))
    assert ["m-2"] == failed(handler(event, lambda_context))
    assert ["m-2"] == failed(handler(event, lambda_context))
    # Two lanes per batch, so only each batch's content is fixed, not its order.
    assert [["m-1", "m-2"], ["m-1", "m-2"]] == [sorted(seen[:2]), sorted(seen[2:])]
    assert 0 == spy.total_calls
    assert ["DISABLED", "DISABLED"] == decisions.outcomes


@pytest.mark.parametrize(
    "event", [None, "Records", [], 42, {}, {"Records": None}, {"Records": {"a": 1}}]
)
def test_an_event_that_is_not_a_batch_raises_a_typed_error(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext, event: Any
) -> None:
    """No Records list: nothing can be reported, so the handler says so loudly."""

    @idempotent_sqs_handler(persistence_store=idempotency_store)
    def handler(record: SQSRecord, context: Any) -> None:
        raise AssertionError("never called")

    with pytest.raises(MalformedEventError, match="Records") as raised:
        handler(event, lambda_context)
    assert isinstance(raised.value, IdempotencyError)
    assert isinstance(raised.value, ValueError)


def test_empty_batch_reports_nothing(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """An empty Records list is a batch with nothing to do."""

    @idempotent_sqs_handler(persistence_store=idempotency_store)
    def handler(record: SQSRecord, context: Any) -> None:
        raise AssertionError("never called")

    assert {"batchItemFailures": []} == handler({"Records": []}, lambda_context)


def test_a_record_without_an_identifier_fails_the_whole_batch_unprocessed(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """It cannot be reported alone, so every record is reported and none is processed."""
    seen: list[str] = []

    @idempotent_sqs_handler(persistence_store=idempotency_store)
    def handler(record: SQSRecord, context: Any) -> None:
        seen.append(record.message_id)

    event = batch(message("m-1"), "garbage", {"body": "no id"}, message("m-2"), message("m-1"))
    assert ["m-1", "m-2"] == failed(handler(event, lambda_context))
    assert [] == seen
    assert "records=1,2 have no identifier" in caplog.text


@pytest.mark.parametrize(
    "options",
    [
        {"max_concurrency": 0},
        {"max_concurrency": True},
        {"max_concurrency": "4"},
        {"time_safety_margin_ms": -1},
        {"time_safety_margin_ms": 1.5},
        {"key_prefix": ""},
        {"config": {"event_key_jmespath": "id"}},
    ],
)
def test_bad_options_fail_at_decoration_time(
    idempotency_store: InMemoryPersistenceLayer, options: dict[str, Any]
) -> None:
    """Options are checked when the decorator is built, not on the first batch."""
    with pytest.raises(IdempotencyConfigError):
        idempotent_sqs_handler(persistence_store=idempotency_store, **options)


def test_store_and_handler_are_checked_at_decoration_time(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """A store lacking the protocol, or a handler that is not callable, is refused."""
    with pytest.raises(IdempotencyConfigError, match="PersistenceStore"):
        idempotent_stream_handler(persistence_store=object())  # type: ignore[arg-type]
    decorate = idempotent_sqs_handler(persistence_store=idempotency_store)
    with pytest.raises(IdempotencyConfigError, match="callable"):
        decorate("not a function")  # type: ignore[arg-type]


def test_batch_handler_keeps_the_record_handler_name_and_docstring(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """The Lambda entry point looks like the function the user wrote."""

    @idempotent_sqs_handler(persistence_store=idempotency_store)
    def lambda_handler(record: SQSRecord, context: Any) -> None:
        """Charge one order."""

    assert "lambda_handler" == lambda_handler.__name__
    assert "Charge one order." == lambda_handler.__doc__


def test_callable_object_handler_is_keyed_by_its_class(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A record handler that is an object (no ``__qualname__``) gets its class's prefix."""
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "fn")
    spy = SpyStore(idempotency_store)

    class Consumer:
        def __call__(self, record: SQSRecord, context: Any) -> None:
            return None

    handler = idempotent_sqs_handler(persistence_store=spy)(Consumer())
    assert [] == failed(handler(batch(message("m-1")), lambda_context))
    assert spy.claims[0].idempotency_key.startswith(f"fn.{__name__}.{Consumer.__qualname__}#")


def test_object_with_an_async_call_method_is_awaited(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A callable object whose ``__call__`` is ``async def`` counts as an async handler."""
    seen: list[str] = []

    class Consumer:
        async def __call__(self, record: SQSRecord, context: Any) -> str:
            seen.append(record.message_id)
            return record.message_id

    handler = idempotent_sqs_handler(persistence_store=idempotency_store)(Consumer())
    assert [] == failed(handler(batch(message("m-1")), lambda_context))
    assert [] == failed(handler(batch(message("m-1")), lambda_context))
    assert ["m-1"] == seen


def test_async_handler_key_errors_fail_the_record(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Problems before the body runs fail the record on the async path; no key runs it."""

    @idempotent_sqs_handler(
        persistence_store=idempotency_store,
        config=IdempotencyConfig(event_key_jmespath="powertools_json(body).id"),
    )
    async def handler(record: SQSRecord, context: Any) -> None:
        return None

    event = batch(message("m-1", "not json"), message("m-2", {"id": 2}), message("m-3", {}))
    assert ["m-1"] == failed(handler(event, lambda_context))


def test_a_failure_is_logged_by_its_type_only_even_at_debug(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The exception's arguments may hold payload values: no log line or traceback shows them."""

    @idempotent_sqs_handler(persistence_store=idempotency_store)
    def handler(record: SQSRecord, context: Any) -> None:
        raise ValueError("card 4111-1111-1111-1111 declined")

    with caplog.at_level(logging.DEBUG, logger="idempotent_lambda"):
        handler(batch(message("m-1")), lambda_context)
    assert any("ValueError" in r.getMessage() for r in caplog.records)
    assert all(r.exc_info is None for r in caplog.records)
    assert "4111-1111-1111-1111" not in caplog.text


def test_docs_testing_example_runs(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The minimal event of the README (no attributes at all) is accepted."""

    @idempotent_sqs_handler(persistence_store=idempotency_store)
    def handler(record: SQSRecord, context: Any) -> dict[str, Any]:
        assert {} == record.attributes
        assert {} == record.message_attributes
        return {"order": record.json_body["order_id"]}

    event = {
        "Records": [
            {"messageId": "m-1", "body": json.dumps({"order_id": 1}), "eventSourceARN": ARN}
        ]
    }
    assert {"batchItemFailures": []} == handler(event, lambda_context)
    assert {"batchItemFailures": []} == handler(event, lambda_context)
