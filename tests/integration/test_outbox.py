"""The outbox end to end on moto's real services: DynamoDB and its stream, EventBridge, SQS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from idempotent_lambda import IdempotencyConfig, event_keys, idempotent
from idempotent_lambda.adapters.sqs import idempotent_sqs_handler
from idempotent_lambda.exceptions import IdempotencyTransactionError
from idempotent_lambda.outbox import MAX_EVENTS, emit, publish_handler
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.transaction import current_transaction
from tests.integration._outbox_stack import (
    SOURCE,
    OutboxStack,
    ThrottleAllButFirst,
    client,
    make_stack,
    sqs_lambda_event,
)

CONFIG = IdempotencyConfig(event_key_jmespath="order_id")
ROOT = Path(__file__).parents[2]


def order_handler(stack: OutboxStack, *, fail_first: bool = False) -> Any:
    """Return an idempotent handler that writes an order and emits OrderCreated for it."""
    calls = {"n": 0}

    @idempotent(persistence_store=stack.store, config=CONFIG)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        calls["n"] += 1
        current_transaction().put(
            stack.table, {**stack.business_key(f"order-{event['order_id']}"), "state": "created"}
        )
        event_id = emit(
            "OrderCreated", {"order_id": event["order_id"]}, source=SOURCE, event_bus_name=stack.bus
        )
        if fail_first and calls["n"] == 1:
            raise RuntimeError("the handler fails after emitting")
        return {"event_id": event_id}

    handler.calls = calls  # type: ignore[attr-defined]
    return handler


def consumer(stack: OutboxStack, seen: list[str]) -> Any:
    """Return an SQS consumer of the events, deduplicating with the OUTBOX_EVENT preset."""
    consumer_store = DynamoDBPersistenceLayer(
        make_stack(stack.endpoint).table, boto3_client=client("dynamodb", stack.endpoint)
    )

    @idempotent_sqs_handler(
        persistence_store=consumer_store,
        config=IdempotencyConfig(event_key_jmespath=event_keys.OUTBOX_EVENT),
    )
    def handle(record: Any, context: Any) -> None:
        seen.append(record.json_body["detail"]["order_id"])

    return handle


def detail_ids(messages: list[dict[str, Any]]) -> list[str]:
    return [json.loads(m["Body"])["detail"]["outbox"]["id"] for m in messages]


def test_a_retried_handler_emits_its_event_once(stack: OutboxStack) -> None:
    """A body that raised wrote nothing; its rerun and a replay give one event, published once."""
    handler = order_handler(stack, fail_first=True)
    with pytest.raises(RuntimeError):
        handler({"order_id": "o-1"}, None)
    assert [] == stack.outbox_items()
    first = handler({"order_id": "o-1"}, None)
    replay = handler({"order_id": "o-1"}, None)
    assert first == replay
    assert 2 == handler.calls["n"]
    publish = publish_handler(stack.store, events_client=stack.events)
    assert {"batchItemFailures": []} == publish({"Records": stack.stream_records()}, None)
    messages = stack.received()
    assert [first["event_id"]] == detail_ids(messages)
    body = json.loads(messages[0]["Body"])
    assert ("OrderCreated", SOURCE, "o-1") == (
        body["detail-type"],
        body["source"],
        body["detail"]["order_id"],
    )
    seen: list[str] = []
    consumer(stack, seen)(sqs_lambda_event(messages, stack.queue_url), None)
    assert ["o-1"] == seen


def test_a_redelivered_stream_record_publishes_once(stack: OutboxStack) -> None:
    """The publisher skips an event its item records as published."""
    handler = order_handler(stack)
    emitted = [handler({"order_id": f"o-{n}"}, None)["event_id"] for n in range(12)]
    batch = {"Records": stack.stream_records()}
    publish = publish_handler(stack.store, events_client=stack.events)
    assert {"batchItemFailures": []} == publish(batch, None)
    assert {"batchItemFailures": []} == publish(batch, None)  # Lambda delivers it again
    assert sorted(emitted) == sorted(detail_ids(stack.received()))
    items = stack.outbox_items()
    assert 12 == len(items)
    assert all("outbox_published_at" in item for item in items)


def test_a_publisher_killed_before_marking_delivers_twice_and_the_consumer_runs_once(
    stack: OutboxStack,
) -> None:
    """PutEvents succeeded, the process died: the event goes out again, the consumer dedups."""
    handler = order_handler(stack)
    emitted = handler({"order_id": "o-1"}, None)["event_id"]
    batch = {"Records": stack.stream_records()}
    worker = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.integration._outbox_kill_worker",
            stack.endpoint,
            stack.table,
        ],
        cwd=ROOT,
        input=json.dumps(batch),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
        check=False,
    )
    assert 17 == worker.returncode, worker.stderr
    assert all("outbox_published_at" not in item for item in stack.outbox_items())
    publish = publish_handler(stack.store, events_client=stack.events)
    assert {"batchItemFailures": []} == publish(batch, None)  # Lambda retries the batch
    messages = stack.received()
    assert [emitted, emitted] == detail_ids(messages)
    assert 2 == len({m["MessageId"] for m in messages})
    seen: list[str] = []
    handle = consumer(stack, seen)
    handle(sqs_lambda_event(messages[:1], stack.queue_url), None)
    handle(sqs_lambda_event(messages[1:], stack.queue_url), None)
    assert ["o-1"] == seen


def test_a_poison_event_fails_its_own_record_and_holds_back_no_other(stack: OutboxStack) -> None:
    """An event PutEvents rejects fails its record; the others are published, once."""

    @idempotent(persistence_store=stack.store, config=CONFIG)
    def handler(event: dict[str, Any], context: Any) -> None:
        emit(
            "OrderCreated",
            {"order_id": event["order_id"]},
            source=SOURCE,
            event_bus_name=event["bus"],
        )

    # First in the batch: moto's PutEvents stops at an unknown bus, having sent the entries
    # before it; AWS rejects such a request whole. Here both mean: nothing was sent.
    handler({"order_id": "poison", "bus": "no-such-bus"}, None)
    handler({"order_id": "good-1", "bus": stack.bus}, None)
    handler({"order_id": "good-2", "bus": stack.bus}, None)
    records = stack.stream_records()
    outbox_records = [r for r in records if "#outbox#" in r["dynamodb"]["Keys"]["id"]["S"]]
    poison = next(
        r for r in outbox_records if "poison" in r["dynamodb"]["NewImage"]["outbox_detail"]["S"]
    )
    publish = publish_handler(stack.store, events_client=stack.events)
    answer = publish({"Records": records}, None)
    failed = [f["itemIdentifier"] for f in answer["batchItemFailures"]]
    sequence = [r["dynamodb"]["SequenceNumber"] for r in records]
    first = sequence.index(poison["dynamodb"]["SequenceNumber"])
    assert sequence[first:] == failed  # the checkpoint: from the poison on
    delivered = [json.loads(m["Body"])["detail"]["order_id"] for m in stack.received()]
    assert ["good-1", "good-2"] == sorted(delivered)
    retried = [r for r in records if r["dynamodb"]["SequenceNumber"] in failed]
    again = publish({"Records": retried}, None)
    assert [poison["dynamodb"]["SequenceNumber"]] == [
        f["itemIdentifier"] for f in again["batchItemFailures"]
    ][:1]
    assert [] == stack.received()  # the good events that came again were not sent again


def test_more_events_than_a_transaction_holds_raise_before_anything_is_written(
    stack: OutboxStack,
) -> None:
    """The write after the 99th raises in the body; nothing reaches the table; 99 fit."""

    @idempotent(persistence_store=stack.store, config=CONFIG)
    def handler(event: dict[str, Any], context: Any) -> int:
        current_transaction().put(stack.table, {"id": f"order-{event['order_id']}"})
        for n in range(event["events"]):
            emit("Line", {"n": n}, source=SOURCE, event_bus_name=stack.bus)
        return event["events"]

    with pytest.raises(IdempotencyTransactionError, match="at most 99 events"):
        handler({"order_id": "big", "events": MAX_EVENTS}, None)
    assert [] == client("dynamodb", stack.endpoint).scan(TableName=stack.table)["Items"]
    assert MAX_EVENTS - 1 == handler({"order_id": "fits", "events": MAX_EVENTS - 1}, None)
    assert MAX_EVENTS - 1 == len(stack.outbox_items())
    publish = publish_handler(stack.store, events_client=stack.events)
    assert {"batchItemFailures": []} == publish({"Records": stack.stream_records()}, None)
    assert MAX_EVENTS - 1 == len(set(detail_ids(stack.received())))


def test_entries_eventbridge_throttles_are_sent_again_and_delivered_once(
    stack: OutboxStack,
) -> None:
    """A partial failure: the accepted entry is not sent again, the throttled ones are."""
    handler = order_handler(stack)
    emitted = [handler({"order_id": f"o-{n}"}, None)["event_id"] for n in range(4)]
    throttle = ThrottleAllButFirst(stack.events)
    publish = publish_handler(stack.store, events_client=stack.events)
    assert {"batchItemFailures": []} == publish({"Records": stack.stream_records()}, None)
    assert 2 == throttle.requests
    assert sorted(emitted) == sorted(detail_ids(stack.received()))


def test_the_publisher_reports_the_age_of_the_oldest_unpublished_event(
    stack: OutboxStack,
) -> None:
    """An EMF document per batch: OutboxOldestUnpublishedAge (seconds) and the counts."""
    import io

    from idempotent_lambda.metrics import EMFMetrics
    from idempotent_lambda.testing import ManualClock

    clock = ManualClock(1_800_000_000_000)
    store = DynamoDBPersistenceLayer(
        stack.table, boto3_client=client("dynamodb", stack.endpoint), clock=clock
    )

    @idempotent(persistence_store=store, config=CONFIG)
    def handler(event: dict[str, Any], context: Any) -> None:
        emit(
            "OrderCreated",
            {"order_id": event["order_id"]},
            source=SOURCE,
            event_bus_name=event["bus"],
        )

    handler({"order_id": "old", "bus": "no-such-bus"}, None)
    clock.advance(30)
    handler({"order_id": "new", "bus": stack.bus}, None)
    clock.advance(12)
    out = io.StringIO()
    publish = publish_handler(
        store, events_client=stack.events, metrics=EMFMetrics("Orders", stream=out)
    )
    publish({"Records": stack.stream_records()}, None)
    (document,) = [json.loads(line) for line in out.getvalue().splitlines()]
    assert ("Orders", 42.0, 1, 1, 0) == (
        document["_aws"]["CloudWatchMetrics"][0]["Namespace"],
        document["OutboxOldestUnpublishedAge"],
        document["OutboxPublished"],
        document["OutboxPublishFailed"],
        document["OutboxAlreadyPublished"],
    )


def test_one_publisher_serves_functions_that_write_under_their_own_partition(
    dynamodb_endpoint: str,
) -> None:
    """Composite keys: each function's static_pk_value differs from the publisher's."""
    stack = make_stack(dynamodb_endpoint, static_pk_value="idempotency#create-order")
    emitted = order_handler(stack)({"order_id": "o-1"}, None)["event_id"]
    publisher_store = DynamoDBPersistenceLayer(
        stack.table,
        key_attr="pk",
        sort_key_attr="sk",
        static_pk_value="idempotency#publisher",
        boto3_client=client("dynamodb", stack.endpoint),
    )
    publish = publish_handler(publisher_store, events_client=stack.events)
    batch = {"Records": stack.stream_records()}
    assert {"batchItemFailures": []} == publish(batch, None)
    assert {"batchItemFailures": []} == publish(batch, None)
    assert [emitted] == detail_ids(stack.received())
    (item,) = stack.outbox_items()
    assert "idempotency#create-order" == item["pk"]["S"]
    assert "outbox_published_at" in item


def test_a_malformed_record_or_an_unreadable_item_fails_alone(stack: OutboxStack) -> None:
    """Neither stops the good event; each is reported, with what follows it (the checkpoint)."""
    handler = order_handler(stack)
    good = handler({"order_id": "o-1"}, None)["event_id"]
    ddb = client("dynamodb", stack.endpoint)
    broken_key = "p#0#outbox#00000000-0000-0000-0000-000000000001"
    ddb.put_item(
        TableName=stack.table,
        Item={"id": {"S": broken_key}, "outbox_id": {"S": "x"}, "outbox_detail": {"S": "[1]"}},
    )
    records = stack.stream_records()
    broken = next(r for r in records if r["dynamodb"]["Keys"]["id"]["S"] == broken_key)
    malformed = {"eventID": "m", "eventName": "INSERT", "dynamodb": {"SequenceNumber": "1"}}
    publish = publish_handler(stack.store, events_client=stack.events)
    answer = publish({"Records": [*records, malformed]}, None)
    failed = [f["itemIdentifier"] for f in answer["batchItemFailures"]]
    assert broken["dynamodb"]["SequenceNumber"] == failed[0]
    assert "1" == failed[-1]
    assert [good] == detail_ids(stack.received())


def test_concurrent_duplicates_emit_one_event(stack: OutboxStack) -> None:
    """Real threads, one key: the duplicates are refused while the body runs; one event."""
    import threading

    from idempotent_lambda import IdempotencyAlreadyInProgressError

    entered, go = threading.Event(), threading.Event()

    @idempotent(persistence_store=stack.store, config=CONFIG)
    def handler(event: dict[str, Any], context: Any) -> str:
        event_id = emit("OrderCreated", {"order_id": event["order_id"]}, source=SOURCE)
        entered.set()
        assert go.wait(60)
        return event_id

    results: list[Any] = []
    first = threading.Thread(target=lambda: results.append(handler({"order_id": "o"}, None)))
    first.start()
    assert entered.wait(60)
    refused: list[BaseException] = []

    def duplicate() -> None:
        try:
            handler({"order_id": "o"}, None)
        except IdempotencyAlreadyInProgressError as exc:
            refused.append(exc)

    others = [threading.Thread(target=duplicate) for _ in range(3)]
    for thread in others:
        thread.start()
    for thread in others:
        thread.join(60)
    go.set()
    first.join(60)
    assert 3 == len(refused)
    assert [results[0]] == [i["outbox_id"]["S"] for i in stack.outbox_items()]


def matches(pattern: Any, value: Any) -> bool:
    """Evaluate an event filter pattern of value lists and ``exists`` (Lambda's rules)."""
    if isinstance(pattern, dict):
        return isinstance(value, dict) and all(
            matches(rule, value.get(name)) for name, rule in pattern.items()
        )
    return any(
        (value is not None) == rule["exists"] if isinstance(rule, dict) else value == rule
        for rule in pattern
    )


def test_the_stream_filter_keeps_new_outbox_items_and_nothing_else(stack: OutboxStack) -> None:
    """Of a real stream (records, events, marks, releases), the pattern keeps outbox INSERTs."""
    from idempotent_lambda._outbox_format import is_outbox_key
    from idempotent_lambda.outbox import STREAM_FILTER_PATTERN

    handler = order_handler(stack, fail_first=True)
    with pytest.raises(RuntimeError):
        handler({"order_id": "o-1"}, None)  # a claim, then its release
    handler({"order_id": "o-1"}, None)
    handler({"order_id": "o-2"}, None)
    publish = publish_handler(stack.store, events_client=stack.events)
    publish({"Records": stack.stream_records()}, None)  # its marks are MODIFYs
    records = stack.stream_records(from_start=True)
    kept = [r for r in records if matches(STREAM_FILTER_PATTERN, r)]
    outbox_inserts = [
        r
        for r in records
        if r["eventName"] == "INSERT" and is_outbox_key(r["dynamodb"]["Keys"]["id"]["S"])
    ]
    assert 2 == len(kept)
    assert outbox_inserts == kept
    assert len(records) > 2 * len(kept)
