"""The sample's outbox end to end on moto: CreateOrder -> stream -> PublishEvents -> bus -> queue
-> ReserveStock, each event taking effect once, whatever is retried or redelivered."""

from __future__ import annotations

import fnmatch
import json
import time
import uuid
from collections import Counter
from typing import Any

import boto3
import pytest

from idempotent_lambda._outbox_format import EMITTED_AT, ID, KEY_MARK, PENDING
from samples.local_app import LocalApp, Outbox, order_body
from samples.local_lambda import PublisherKilled, filter_records, is_outbox_key, stream_event
from samples.outbox_steps import TAG, step_outbox
from samples.scenario import step_create_orders
from samples.watchers import Transcript

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")


def outbox_of(app: LocalApp) -> Outbox:
    assert app.outbox is not None  # the fixture's server serves EventBridge and SQS
    return app.outbox


def run_records(app: LocalApp, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The outbox records of this run's orders (their customer ids end with the run id)."""
    return [
        r
        for r in records
        if json.loads(r["dynamodb"]["NewImage"]["outbox_detail"]["S"])["customer_id"].endswith(
            app.run_id
        )
    ]


def stock(app: LocalApp, skus: set[str]) -> Counter[str]:
    found: Counter[str] = Counter()
    for sku in skus:
        item = app.dynamodb.get_item(
            TableName=app.tables["StockTable"], Key={"sku": {"S": sku}}, ConsistentRead=True
        ).get("Item")
        found[sku] = int(item["reserved"]["N"]) if item else 0
    return found


def new_order(app: LocalApp, sku: str, quantity: int) -> tuple[str, list[dict[str, Any]]]:
    """POST one order; return its id and its outbox record, as the publisher's filter delivers."""
    created = app.post_order(
        order_body(f"olga-{app.run_id}", (sku, quantity, "5.00")), f"k-{app.run_id}-{sku}"
    )
    assert 201 == created.status
    _, delivered = outbox_of(app).read()
    records = run_records(app, delivered)
    assert 1 == len(records)
    return str(created.body["order_id"]), records


def consume(app: LocalApp) -> tuple[int, dict[str, Any]]:
    """Hand every queued message to ReserveStock; return how many there were and its answer."""
    messages = outbox_of(app).queue.receive()
    if not messages:
        return 0, {"batchItemFailures": []}
    result = app.call("ReserveStockFunction", {"Records": messages})
    outbox_of(app).queue.settle(messages, result)
    return len(messages), result


def test_the_outbox_step_passes_every_check(app: LocalApp) -> None:
    """The demo's outbox step: a retried handler, a redelivered record, a killed publisher."""
    lines: list[str] = []
    t = Transcript(out=lines.append)
    step_create_orders(app, t)
    step_outbox(app, t)
    assert [] == t.failures, "\n".join(lines)
    assert 10 == sum(TAG in line and "[ok]" in line for line in lines)


def test_each_order_reserves_its_stock_once_through_the_bus(app: LocalApp) -> None:
    """Published, routed by the rule to the queue, consumed: the stock of each line, once."""
    sku = f"SKU-{app.run_id.upper()}"
    order_id, records = new_order(app, sku, 3)

    published = app.call("PublishEventsFunction", stream_event(records))
    count, consumed = consume(app)

    assert {"batchItemFailures": []} == published
    assert (1, {"batchItemFailures": []}) == (count, consumed)
    assert Counter({sku: 3}) == stock(app, {sku})
    assert (
        order_id == json.loads(records[0]["dynamodb"]["NewImage"]["outbox_detail"]["S"])["order_id"]
    )


def test_a_redelivered_stream_record_publishes_nothing_again(app: LocalApp) -> None:
    """The same record twice: the second finds its item marked published and puts nothing."""
    sku = f"SKU-{app.run_id.upper()}"
    _, records = new_order(app, sku, 1)
    app.call("PublishEventsFunction", stream_event(records))
    put = sum(app.requests.events_put.values())

    again = app.call("PublishEventsFunction", stream_event(records))
    count, _ = consume(app)

    assert {"batchItemFailures": []} == again
    assert put == sum(app.requests.events_put.values())
    assert 1 == count  # the first delivery only
    assert Counter({sku: 1}) == stock(app, {sku})


def test_a_publisher_killed_after_put_events_delivers_twice_and_reserves_once(
    app: LocalApp,
) -> None:
    """Killed between PutEvents and the mark: the retry publishes again; the consumer dedups."""
    sku = f"SKU-{app.run_id.upper()}"
    _, records = new_order(app, sku, 2)
    outbox_of(app).kill.arm()
    with pytest.raises(PublisherKilled):
        app.call("PublishEventsFunction", stream_event(records))
    retried = app.call("PublishEventsFunction", stream_event(records))
    runs = app.executions("ReserveStockFunction")

    count, consumed = consume(app)

    assert {"batchItemFailures": []} == retried
    assert (2, {"batchItemFailures": []}) == (count, consumed)
    assert 1 == app.executions("ReserveStockFunction") - runs
    assert Counter({sku: 2}) == stock(app, {sku})


def test_without_idempotency_the_duplicate_would_reserve_twice(
    app: LocalApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above can fail: with idempotency off, the two deliveries reserve twice."""
    sku = f"SKU-{app.run_id.upper()}"
    _, records = new_order(app, sku, 2)
    outbox_of(app).kill.arm()
    with pytest.raises(PublisherKilled):
        app.call("PublishEventsFunction", stream_event(records))
    app.call("PublishEventsFunction", stream_event(records))
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "1")

    count, _ = consume(app)

    assert 2 == count
    assert Counter({sku: 4}) == stock(app, {sku})


def test_the_publisher_filter_delivers_outbox_inserts_only(app: LocalApp) -> None:
    """Of the idempotency table's real stream records, the template's filter keeps the outbox
    items' INSERTs: not the records' writes, not the publisher's own "published" marks."""
    sku = f"SKU-{app.run_id.upper()}"
    _, records = new_order(app, sku, 1)
    app.call("PublishEventsFunction", stream_event(records))
    outbox = outbox_of(app)

    everything = outbox.stream.read()  # the mark (MODIFY) and anything else since
    kept = filter_records(everything, outbox.filters)
    marks = [
        r
        for r in everything
        if r["eventName"] == "MODIFY" and is_outbox_key(r["dynamodb"]["Keys"]["id"]["S"])
    ]

    assert marks  # the publisher's mark is on the stream...
    assert [] == kept  # ...and the filter drops it
    assert records == filter_records(records, outbox.filters)


def test_the_rule_routes_order_created_only(app: LocalApp) -> None:
    """The bus's rule (from the template) sends OrderCreated of source orders, nothing else."""
    client = boto3.client(
        "events",
        endpoint_url=app.environment["AWS_ENDPOINT_URL_EVENTBRIDGE"],
        region_name="us-east-1",
    )
    bus = app.buses["OrderEventsBus"]
    entries = [
        {"Source": "orders", "DetailType": "OrderShipped", "Detail": "{}", "EventBusName": bus},
        {"Source": "other", "DetailType": "OrderCreated", "Detail": "{}", "EventBusName": bus},
    ]
    assert 0 == client.put_events(Entries=entries)["FailedEntryCount"]

    assert [] == outbox_of(app).queue.receive()


def test_the_publisher_filter_delivers_only_the_items_its_grant_may_read(app: LocalApp) -> None:
    """On the table's real stream, another function's outbox item (an INSERT with an outbox id,
    under its own key prefix) is dropped by the template's filter, CreateOrder's is kept, and
    every kept key matches the publisher's LeadingKeys grant: no batch holds an item whose
    read would be denied."""
    from samples.local_stack import load_template

    sku = f"SKU-{app.run_id.upper()}"
    foreign = f"orders.process_payment#{app.run_id}{KEY_MARK}{uuid.uuid4()}"
    app.dynamodb.put_item(
        TableName=app.tables["IdempotencyTable"],
        Item={"id": {"S": foreign}, ID: {"S": str(uuid.uuid4())}, "outbox_detail": {"S": "{}"}},
    )
    created = app.post_order(order_body(f"olga-{app.run_id}", (sku, 1, "5.00")), f"k-{sku}")
    assert 201 == created.status
    written, records = outbox_of(app).read()  # everything since, and what the filter keeps

    statements = load_template()["Resources"]["PublishEventsFunction"]["Properties"]["Policies"]
    (grant,) = [s for s in statements[0]["Statement"] if s["Sid"] == "MarkOutboxEventsPublished"]
    patterns = grant["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]
    keys = [r["dynamodb"]["Keys"]["id"]["S"] for r in records]

    assert written > len(records) >= 1
    assert foreign not in keys
    assert all(any(fnmatch.fnmatchcase(key, p) for p in patterns) for key in keys)
    assert not any(fnmatch.fnmatchcase(foreign, p) for p in patterns)


def test_the_sweeper_publishes_an_event_the_stream_never_brought(app: LocalApp) -> None:
    """An order's event whose stream record was lost (never handed to PublishEvents) and that
    waited 10 minutes: SweepOutbox finds it in the template's index, publishes it once, and the
    consumer reserves its stock once; the late record, if it came, would publish nothing."""
    sku = f"SKU-{app.run_id.upper()}"
    _, records = new_order(app, sku, 4)
    key = records[0]["dynamodb"]["Keys"]
    waited = int(time.time() * 1000) - 600_000  # as if emitted 10 minutes ago
    app.dynamodb.update_item(
        TableName=app.tables["IdempotencyTable"],
        Key=key,
        UpdateExpression="SET #at = :at",
        ExpressionAttributeNames={"#at": EMITTED_AT},
        ExpressionAttributeValues={":at": {"N": str(waited)}},
    )
    put = sum(app.requests.events_put.values())

    swept = app.call("SweepOutboxFunction", {})
    count, consumed = consume(app)
    late = app.call("PublishEventsFunction", stream_event(records))

    assert 0 == swept["failed"]
    assert {"batchItemFailures": []} == consumed
    assert count >= 1
    assert Counter({sku: 4}) == stock(app, {sku})
    assert {"batchItemFailures": []} == late
    assert 0 == consume(app)[0]  # the late record put nothing on the bus
    assert sum(app.requests.events_put.values()) > put
    item = app.dynamodb.get_item(
        TableName=app.tables["IdempotencyTable"], Key=key, ConsistentRead=True
    )["Item"]
    assert PENDING not in item  # out of the index: the next sweep reads nothing of it
