"""Concurrent batches: lanes keep each source's order, answers match sequential processing, and a
redelivered batch replays from one read of all its keys."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idempotent_lambda import (
    IdempotencyConfig,
    InMemoryPersistenceLayer,
)
from idempotent_lambda.adapters.dynamodb_stream import (
    DynamoDBStreamRecord,
    idempotent_stream_handler,
)
from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests.unit._doubles import BatchSpyStore

ARN = "arn:aws:sqs:us-east-1:123456789012:orders"
FIFO_ARN = "arn:aws:sqs:us-east-1:123456789012:orders.fifo"
STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/T/stream/2020-01-01T00:00:00.000"
BUSINESS_KEY = IdempotencyConfig(event_key_jmespath="powertools_json(body).order")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def message(
    message_id: str,
    order: Any = None,
    *,
    arn: str = ARN,
    group: str | None = None,
    receive_count: str = "1",
) -> dict[str, Any]:
    """Return a well-formed SQS record whose body names ``order``."""
    attributes = {"ApproximateReceiveCount": receive_count}
    if group is not None:
        attributes["MessageGroupId"] = group
    return {
        "messageId": message_id,
        "receiptHandle": "handle",
        "body": json.dumps({"order": order if order is not None else message_id}),
        "attributes": attributes,
        "messageAttributes": {},
        "eventSourceARN": arn,
    }


def change(sequence: int, item: str) -> dict[str, Any]:
    """Return a stream record of ``item`` with sequence number ``sequence``."""
    return {
        "eventID": f"e{sequence}",
        "eventName": "MODIFY",
        "eventSourceARN": STREAM_ARN,
        "dynamodb": {
            "Keys": {"pk": {"S": item}},
            "NewImage": {"pk": {"S": item}, "n": {"N": str(sequence)}},
            "SequenceNumber": f"{sequence:021d}",
            "StreamViewType": "NEW_IMAGE",
        },
    }


def failed(response: Mapping[str, Any]) -> list[str]:
    """Return the reported identifiers, in order."""
    return [failure["itemIdentifier"] for failure in response["batchItemFailures"]]


class Handler:
    """A record handler that fails the identifiers in ``fail`` and remembers what ran."""

    def __init__(self, fail: set[str] | None = None) -> None:
        self.fail = set(fail or ())
        self.ran: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, record: Any, context: Any) -> str:
        name = record.message_id if isinstance(record, SQSRecord) else record.sequence_number
        with self._lock:
            self.ran.append(name)
        if name in self.fail:
            raise RuntimeError("boom")
        return name


def sqs_handler(store: Any, handler: Handler, concurrency: int, config: Any = None) -> Any:
    """Return the batch handler of ``handler`` over ``store``."""
    return idempotent_sqs_handler(
        persistence_store=store, config=config, max_concurrency=concurrency
    )(handler)


def stream_handler(store: Any, handler: Handler, concurrency: int) -> Any:
    """Return the stream batch handler of ``handler`` over ``store``."""
    return idempotent_stream_handler(persistence_store=store, max_concurrency=concurrency)(handler)


# --- same answer as sequential processing --------------------------------------------------------


@st.composite
def sqs_batches(draw: st.DrawFn) -> tuple[list[dict[str, Any]], set[str]]:
    """A batch of up to 30 messages (standard or FIFO in up to 4 groups, orders that repeat)."""
    fifo = draw(st.booleans())
    size = draw(st.integers(min_value=0, max_value=30))
    records = [
        message(
            f"m{n}",
            draw(st.integers(min_value=0, max_value=12)),
            arn=FIFO_ARN if fifo else ARN,
            group=draw(st.sampled_from("abcd")) if fifo else None,
        )
        for n in range(size)
    ]
    fail = draw(st.sets(st.sampled_from([f"m{n}" for n in range(size)]))) if size else set()
    return records, fail


@SETTINGS
@given(batch=sqs_batches())
def test_sqs_answer_with_concurrency_equals_the_sequential_answer(
    batch: tuple[list[dict[str, Any]], set[str]],
) -> None:
    """Whatever fails, 8 lanes report the same records, in the same order, as one lane."""
    records, fail = batch
    answers = [
        failed(
            sqs_handler(InMemoryPersistenceLayer(), Handler(fail), concurrency, BUSINESS_KEY)(
                {"Records": records}, None
            )
        )
        for concurrency in (1, 8)
    ]
    assert answers[0] == answers[1]


@SETTINGS
@given(
    items=st.lists(st.sampled_from("abcde"), max_size=30),
    fail=st.sets(st.integers(min_value=0, max_value=29)),
)
def test_stream_answer_with_concurrency_equals_the_sequential_answer(
    items: list[str], fail: set[int]
) -> None:
    """Whatever fails, 8 lanes report the same records as one lane: all from the first failure."""
    records = [change(n, item) for n, item in enumerate(items)]
    failing = {f"{n:021d}" for n in fail}
    answers = [
        failed(
            stream_handler(InMemoryPersistenceLayer(), Handler(failing), concurrency)(
                {"Records": records}, None
            )
        )
        for concurrency in (1, 8)
    ]
    assert answers[0] == answers[1]
    sequences = [record["dynamodb"]["SequenceNumber"] for record in records]
    first = min((n for n, s in enumerate(sequences) if s in failing), default=len(sequences))
    assert sequences[first:] == answers[1]


# --- ordering ------------------------------------------------------------------------------------


def test_duplicates_of_one_key_run_in_one_lane_and_the_later_ones_replay() -> None:
    """Three messages for one order in a concurrent batch: it runs once and none is reported."""
    store = InMemoryPersistenceLayer()
    handler = Handler()
    records = [message("m0", 7), message("m1", 1), message("m2", 7), message("m3", 7)]
    response = sqs_handler(store, handler, 16, BUSINESS_KEY)({"Records": records}, None)
    assert [] == failed(response)
    assert ["m0", "m1"] == sorted(handler.ran)


def test_fifo_failure_skips_the_rest_of_its_group_while_other_groups_go_on() -> None:
    """Group a fails at a2: a3 is reported without running; group b runs to its end."""
    handler = Handler(fail={"a2"})
    records = [
        message(name, arn=FIFO_ARN, group=name[0]) for name in ["a1", "b1", "a2", "b2", "a3", "b3"]
    ]
    response = sqs_handler(InMemoryPersistenceLayer(), handler, 16)({"Records": records}, None)
    assert ["a2", "a3"] == failed(response)
    assert ["a1", "a2"] == [name for name in handler.ran if name.startswith("a")]
    assert ["b1", "b2", "b3"] == [name for name in handler.ran if name.startswith("b")]


def test_fifo_group_runs_in_order_while_groups_overlap() -> None:
    """Two groups run at the same time (they meet at a barrier), each in its own order."""
    barrier = threading.Barrier(2, timeout=30)
    seen: dict[str, list[str]] = {"a": [], "b": []}

    def handle(record: SQSRecord, context: Any) -> None:
        group = record.message_group_id or ""
        if not seen[group]:
            barrier.wait()
        seen[group].append(record.message_id)

    records = [message(f"{g}{n}", arn=FIFO_ARN, group=g) for n in range(3) for g in "ab"]
    batch_handler = idempotent_sqs_handler(persistence_store=InMemoryPersistenceLayer())(handle)
    assert [] == failed(batch_handler({"Records": records}, None))
    assert {"a": ["a0", "a1", "a2"], "b": ["b0", "b1", "b2"]} == seen


def test_stream_items_run_in_sequence_order_and_overlap() -> None:
    """Items x and y run at the same time (barrier), each item's records in sequence order."""
    barrier = threading.Barrier(2, timeout=30)
    seen: dict[str, list[str]] = {"x": [], "y": []}

    def handle(record: DynamoDBStreamRecord, context: Any) -> None:
        item = record.keys["pk"]
        if not seen[item]:
            barrier.wait()
        seen[item].append(record.sequence_number[-1])

    records = [change(n, "xy"[n % 2]) for n in range(6)]
    batch_handler = idempotent_stream_handler(persistence_store=InMemoryPersistenceLayer())(handle)
    assert [] == failed(batch_handler({"Records": records}, None))
    assert {"x": ["0", "2", "4"], "y": ["1", "3", "5"]} == seen


def test_stream_interleaved_failures_report_from_the_checkpoint_and_redelivery_replays() -> None:
    """Items a, b, c interleave; a fails at 3 and b at 7. Everything from 3 on is reported;
    the redelivered tail runs only a's and b's unfinished records, replaying the rest from one
    batch read."""
    items = "abcabcabcabc"
    records = [change(n, item) for n, item in enumerate(items)]
    seq = [record["dynamodb"]["SequenceNumber"] for record in records]
    store = BatchSpyStore(InMemoryPersistenceLayer())
    handler = Handler(fail={seq[3], seq[7]})
    response = stream_handler(store, handler, 16)({"Records": records}, None)

    assert seq[3:] == failed(response)
    ran = set(handler.ran)
    assert {seq[n] for n in (0, 1, 2, 3, 4, 5, 7, 8, 11)} == ran  # a stops at 3, b at 7
    handler.fail.clear()
    handler.ran.clear()
    store.calls.clear()

    response = stream_handler(store, handler, 16)({"Records": records[3:]}, None)
    assert [] == failed(response)
    assert {seq[n] for n in (3, 6, 7, 9, 10)} == set(handler.ran)
    assert 1 == store.calls["get_many"]
    assert 5 == store.calls["claim"]  # completed ones (4, 5, 8, 11) replay from the read


# --- one read for a redelivered batch ------------------------------------------------------------


def test_fully_redelivered_batch_of_100_costs_one_batch_read() -> None:
    """A redelivered batch of 100 completed messages: one get_many, no other store call."""
    store = BatchSpyStore(InMemoryPersistenceLayer())
    handler = Handler()
    first = [message(f"m{n}") for n in range(100)]
    assert [] == failed(sqs_handler(store, handler, 16)({"Records": first}, None))
    assert 0 == store.calls["get_many"]  # every ApproximateReceiveCount is "1": no read
    store.calls.clear()
    handler.ran.clear()

    again = [message(f"m{n}", receive_count="2") for n in range(100)]
    assert [] == failed(sqs_handler(store, handler, 16)({"Records": again}, None))
    assert {"get_many": 1} == dict(store.calls)
    assert [] == handler.ran


def test_batch_read_checks_the_validation_hash() -> None:
    """A replay from the batch read still refuses a payload that differs from the first."""
    config = IdempotencyConfig(
        event_key_jmespath="messageId", payload_validation_jmespath="powertools_json(body).order"
    )
    store = BatchSpyStore(InMemoryPersistenceLayer())
    handler = Handler()
    sqs_handler(store, handler, 4, config)({"Records": [message("m0", 1), message("m1", 2)]}, None)
    again = [message("m0", 1, receive_count="2"), message("m1", 3, receive_count="2")]
    response = sqs_handler(store, handler, 4, config)({"Records": again}, None)
    assert ["m1"] == failed(response)
    assert ["m0", "m1"] == sorted(handler.ran)
    assert 1 == store.calls["get_many"]


def test_batch_read_ignores_expired_records() -> None:
    """A COMPLETED record past its expiry is not replayed: the message runs again."""
    clock = ManualClock()
    store = BatchSpyStore(InMemoryPersistenceLayer(clock=clock))
    handler = Handler()
    config = IdempotencyConfig(expires_after_seconds=60)
    sqs_handler(store, handler, 4, config)({"Records": [message("m0")]}, None)
    clock.advance(61)
    again = {"Records": [message("m0", receive_count="2")]}
    assert [] == failed(sqs_handler(store, handler, 4, config)(again, None))
    assert ["m0", "m0"] == handler.ran
    assert 1 == store.calls["get_many"]


def test_in_progress_record_from_the_batch_read_goes_through_the_claim() -> None:
    """A key the read finds IN_PROGRESS is claimed as usual: still held, so it is reported."""
    store = BatchSpyStore(InMemoryPersistenceLayer())
    release = threading.Event()
    started = threading.Event()

    def slow(record: SQSRecord, context: Any) -> None:
        started.set()
        release.wait(30)

    holder = idempotent_sqs_handler(persistence_store=store, key_prefix="orders")(slow)
    thread = threading.Thread(target=holder, args=({"Records": [message("m0")]}, None))
    thread.start()
    try:
        assert started.wait(30)
        handler = Handler()
        again = {"Records": [message("m0", receive_count="2")]}
        waiting = idempotent_sqs_handler(persistence_store=store, key_prefix="orders")(handler)
        response = waiting(again, FakeLambdaContext(60_000))
        assert ["m0"] == failed(response)
        assert [] == handler.ran
        assert 1 == store.calls["get_many"]
    finally:
        release.set()
        thread.join(30)


def test_failed_batch_read_falls_back_to_claiming_each_record() -> None:
    """When the batch read fails, every record still runs or replays through its claim."""
    store = BatchSpyStore(InMemoryPersistenceLayer(), fail={"get_many"})
    handler = Handler()
    records = [message(f"m{n}", receive_count="3") for n in range(5)]
    assert [] == failed(sqs_handler(store, handler, 4)({"Records": records}, None))
    assert 5 == len(handler.ran)
    assert 1 == store.calls["get_many"]


# --- time budget under concurrency ---------------------------------------------------------------


@pytest.mark.parametrize("concurrency", [1, 4])
def test_no_record_starts_past_the_time_budget_in_any_lane(concurrency: int) -> None:
    """Once the margin is reached, no lane starts another record; the rest is reported."""
    context = FakeLambdaContext(10_000)
    done = 0
    lock = threading.Lock()

    def spend(record: SQSRecord, context_: Any) -> None:
        nonlocal done
        with lock:
            done += 1
            if done == 3:
                context.set_remaining_ms(500)  # below the 1 000 ms margin from now on

    records = [message(f"m{n}") for n in range(20)]
    handler = idempotent_sqs_handler(
        persistence_store=InMemoryPersistenceLayer(), max_concurrency=concurrency
    )(spend)
    reported = failed(handler({"Records": records}, context))
    assert 20 - done == len(reported)
    assert done < 20
