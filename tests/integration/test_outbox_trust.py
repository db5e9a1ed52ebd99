"""DESIGN §14's outbox: no event forged, lost, or held back by another's item (moto's server).

The real parts: moto's table and its stream (GetRecords), EventBridge with a rule targeting an
SQS queue, SQS. Where IAM must deny, `_deny_proxy` answers as the condition would (moto does
not enforce IAM). The sweeper, doctor and the CLI are in test_outbox_sweeper.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from idempotent_lambda._outbox_format import OutboxEvent, item_key
from idempotent_lambda.outbox import publish_handler
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.testing import ManualClock
from tests.integration._deny_proxy import deny_proxy, leading_keys
from tests.integration._outbox_stack import SOURCE, OutboxStack, client, make_stack
from tests.integration._outbox_trust import (
    delivered,
    emitter,
    put_item,
    quiet_metrics,
    store_on,
    with_index,
)


@pytest.fixture
def stack(dynamodb_endpoint: str) -> OutboxStack:
    """A fresh `OutboxStack` whose table has the index of unpublished items."""
    return with_index(make_stack(dynamodb_endpoint))


# --- 1. The id belongs to the claim: a rerun after expiry emits new events, and they go out ---


def test_a_body_run_again_after_its_record_expired_emits_new_events_that_are_published(
    stack: OutboxStack,
) -> None:
    """The rerun writes new items (INSERTs): the publisher publishes them; the first stays
    marked published."""
    clock = ManualClock()
    store = store_on(stack, clock)
    handler = emitter(store, stack, expires=60)
    publish = publish_handler(store, events_client=stack.events, metrics=quiet_metrics())
    first = handler({"order_id": "o-1"}, None)
    assert {"batchItemFailures": []} == publish({"Records": stack.stream_records()}, None)
    clock.advance(61)
    second = handler({"order_id": "o-1"}, None)
    records = stack.stream_records()
    written = [  # the rerun's write (the other record is the first item's mark)
        r["eventName"]
        for r in records
        if "outbox_id" in r["dynamodb"].get("NewImage", {})
        and "outbox_published_at" not in r["dynamodb"]["NewImage"]
    ]
    assert ["INSERT"] == written
    assert {"batchItemFailures": []} == publish({"Records": records}, None)
    assert first != second
    assert [first, second] == [event for event, _ in delivered(stack)]
    items = stack.outbox_items()
    assert 2 == len(items)
    assert all("outbox_published_at" in item for item in items)


# --- 2. An id only from its own item; only the prefixes served ---


def test_an_item_claiming_another_s_id_neither_publishes_nor_shadows_it(stack: OutboxStack) -> None:
    """A writer under another prefix stores an item with a real event's id: the real event goes
    out with it, the forged item fails its own record and never carries the id."""
    store = store_on(stack)
    real = emitter(store, stack)({"order_id": "o-1"}, None)
    forged_key = item_key("other#" + "ab" * 32, "00000000-0000-5000-8000-000000000000")
    put_item(stack, forged_key, outbox_id=real)
    publish = publish_handler(store, events_client=stack.events, metrics=quiet_metrics())
    records = [r for r in stack.stream_records() if r["eventName"] == "INSERT"]
    answer = publish({"Records": records}, None)
    assert [(real, {"order_id": "o-1"})] == delivered(stack)
    forged_seq = next(
        r["dynamodb"]["SequenceNumber"]
        for r in records
        if r["dynamodb"]["Keys"]["id"]["S"] == forged_key
    )
    assert forged_seq in {f["itemIdentifier"] for f in answer["batchItemFailures"]}


def test_a_publisher_serves_only_its_key_prefixes(stack: OutboxStack) -> None:
    """Another prefix's item is done at once: not published, not failed."""
    store = store_on(stack)
    ours = emitter(store, stack, prefix="orders")({"order_id": "o-1"}, None)
    emitter(store, stack, prefix="payments")({"order_id": "o-2"}, None)
    publish = publish_handler(
        store, events_client=stack.events, metrics=quiet_metrics(), key_prefixes=["orders"]
    )
    assert {"batchItemFailures": []} == publish({"Records": stack.stream_records()}, None)
    assert [ours] == [event for event, _ in delivered(stack)]
    published = [i for i in stack.outbox_items() if "outbox_published_at" in i]
    assert [["orders"]] == [[i["id"]["S"].split("#")[0]] for i in published]


# --- 3. An item that cannot be read, parsed or sent fails its own record only ---


def test_an_item_the_publisher_may_not_read_fails_alone(stack: OutboxStack) -> None:
    """IAM (LeadingKeys orders#*, answered by DenyProxy) refuses one item of the batch: the
    others are published, and only that record (with those after it) is reported."""
    handler = emitter(store_on(stack), stack, prefix="payments")
    denied = handler({"order_id": "o-0"}, None)
    orders = emitter(store_on(stack), stack, prefix="orders")
    allowed = [orders({"order_id": f"o-{n}"}, None) for n in (1, 2)]
    records = stack.stream_records()
    with deny_proxy(stack.endpoint, leading_keys("id", ["orders#*"])) as (endpoint, refused):
        store = DynamoDBPersistenceLayer(stack.table, boto3_client=client("dynamodb", endpoint))
        publish = publish_handler(store, events_client=stack.events, metrics=quiet_metrics())
        answer = publish({"Records": records}, None)
    assert "BatchGetItem" in refused
    assert allowed == [event for event, _ in delivered(stack)]
    reported = {f["itemIdentifier"] for f in answer["batchItemFailures"]}
    denied_seq = next(
        r["dynamodb"]["SequenceNumber"]
        for r in records
        if r["dynamodb"].get("NewImage", {}).get("outbox_id", {}).get("S") == denied
    )
    assert denied_seq in reported


@pytest.mark.parametrize(
    "broken",
    [
        {"emitted_at": 10**20},
        {"emitted_at": -5},
        {"detail": "[" * 5000 + "]" * 5000},
        {"detail": '{"a":' * 5000 + "1" + "}" * 5000},
        {"outbox_traceparent": {"N": "1"}},
    ],
)
def test_an_item_that_cannot_be_parsed_fails_alone_and_the_cli_shows_no_traceback(
    stack: OutboxStack, broken: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Out-of-range emit time, a detail nested 5,000 deep: that record fails, the rest go out;
    `outbox list` exits 0 and `outbox republish` answers with an error, never a traceback."""
    from idempotent_lambda.cli import main

    store = store_on(stack)
    bad_id = put_item(
        stack, item_key("orders#" + "cd" * 32, "00000000-0000-5000-8000-000000000001"), **broken
    )
    good = emitter(store, stack)({"order_id": "o-1"}, None)
    publish = publish_handler(store, events_client=stack.events, metrics=quiet_metrics())
    answer = publish({"Records": stack.stream_records()}, None)
    assert [good] == [event for event, _ in delivered(stack)]
    assert 1 <= len(answer["batchItemFailures"])
    table = ["--table", stack.table, "--endpoint-url", stack.endpoint]
    capsys.readouterr()
    assert 0 == main(["outbox", "list", *table])
    assert f"unreadable outbox item, event {bad_id}" in capsys.readouterr().err
    assert 2 == main(["outbox", "republish", *table, bad_id])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out


# --- 8. An untraced publisher passes on only a valid traceparent ---


@pytest.mark.no_tracer_provider
@pytest.mark.parametrize(
    ("stored", "sent"),
    [
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",) * 2,
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\x1b[2J", None),
        ("00-" + "a" * 5000, None),
        ("not a traceparent", None),
    ],
)
def test_a_publisher_without_tracing_passes_on_only_a_w3c_traceparent(
    stack: OutboxStack, stored: str, sent: str | None
) -> None:
    """Control characters, kilobytes or another format: the event goes out without it."""
    store = store_on(stack)
    put_item(
        stack,
        item_key("orders#" + "56" * 32, "00000000-0000-5000-8000-000000000005"),
        outbox_traceparent={"S": stored},
    )
    publish = publish_handler(store, events_client=stack.events, metrics=quiet_metrics())
    assert {"batchItemFailures": []} == publish({"Records": stack.stream_records()}, None)
    ((message,),) = [stack.received()]
    assert sent == json.loads(message["Body"])["detail"]["outbox"].get("traceparent")


def test_an_event_that_cannot_become_an_entry_fails_alone_and_every_span_ends(
    stack: OutboxStack, traces: Any
) -> None:
    """An entry that cannot be built (an emit time no datetime holds) fails with its own error
    code; the other event goes out; both publication spans end, the failed one in error."""
    from opentelemetry.trace import StatusCode

    from idempotent_lambda.outbox._publisher import Publisher

    publisher = Publisher(store_on(stack), events_client=stack.events, metrics=quiet_metrics())
    good = OutboxEvent("1" * 36, "Good", "{}", SOURCE, stack.bus, 1_700_000_000_000)
    bad = OutboxEvent("2" * 36, "Bad", "{}", SOURCE, stack.bus, 10**20)
    published, errors = publisher.publish([good, bad])
    assert [good] == published
    assert ["InvalidEntry:"] == [code[: len("InvalidEntry:")] for code in errors.values()]
    assert StatusCode.UNSET == traces.named("outbox publish Good").status.status_code
    assert StatusCode.ERROR == traces.named("outbox publish Bad").status.status_code
    assert 1 == len(stack.received())
