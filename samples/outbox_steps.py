"""The outbox step of ``make demo``: ``OrderCreated`` from CreateOrder to ReserveStock, once.

Everything runs on the local server's real services: CreateOrder's transaction writes the event
as an outbox item of ``IdempotencyTable``; the table's stream (read with ``GetRecords``, filtered
with the publisher's mapping's filter criteria from ``template.yaml``) feeds PublishEvents, which
puts the events on the bus with ``PutEvents``; the bus's rule sends them to ``OrderEventsQueue``,
whose messages feed ReserveStock. Three faults are shown, and each event still takes effect once:
a handler retried, a stream record delivered again, a publisher killed after ``PutEvents`` and
before marking its item published (the event is delivered twice; the consumer deduplicates it).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from samples.local_app import PUBLISHER, LocalApp, Outbox, order_body
from samples.local_lambda import PublisherKilled, is_outbox_key, sqs_event, stream_event
from samples.local_stack import load_template
from samples.watchers import Transcript, metric_total

PUBLISH, CONSUME = PUBLISHER[0], "ReserveStockFunction"
#: How every outbox line of the transcript starts, so they can be picked out of it.
TAG = "outbox:"


def step_outbox(app: LocalApp, t: Transcript) -> None:
    """Scenario 4: the orders' events through the outbox, the bus and the queue, once each."""
    t.step("4. The outbox: OrderCreated from CreateOrder to ReserveStock, each once")
    outbox = app.outbox
    if outbox is None:
        t.note("skipped: no EventBridge and SQS endpoint (the embedded server has both)")
        return
    documents = len(app.metrics.documents)
    batch = _handler_retried(app, t, outbox)
    _publish_and_consume(app, t, outbox, batch)
    _stream_record_redelivered(app, t, outbox, batch)
    _publisher_killed(app, t, outbox)
    _alarmed_metric(app, t, app.metrics.documents[documents:])


def _handler_retried(app: LocalApp, t: Transcript, outbox: Outbox) -> list[dict[str, Any]]:
    """Step 1's orders (a retry, duplicates) and one whose first commit failed (its body ran
    twice) emitted one event each; return their records."""
    t.note(
        f"{TAG} step 1 created {len(_orders_of_run(app))} orders, with a retry, 10 concurrent "
        "duplicates and a late one, a 422 and 400s"
    )
    body, key = order_body(f"hugo-{app.run_id}", ("LAMP-2", 1, "40.00")), f"order-{app.run_id}-r"
    runs = app.executions("CreateOrderFunction")
    outbox.fail_commit.arm()
    try:
        first = f"{app.post_order(body, key).status}"
    except Exception as exc:  # the invocation failed: API Gateway answers 500
        first = f"the invocation failed ({type(exc).__name__})"
    retry = app.post_order(body, key)
    ran = app.executions("CreateOrderFunction") - runs
    t.note(
        f"{TAG} a new order whose commit fails after its body ran -> {first}; the client "
        f"retries -> {retry.status}; the body ran {ran}x"
    )
    on_stream, delivered = outbox.read()
    mine = _of_run(delivered, app.run_id)
    per_order = Counter(str(_detail(r)["order_id"]) for r in mine)
    orders = {str(o["order_id"]) for o in _orders_of_run(app)}
    t.note(
        f"{TAG} IdempotencyTable stream: {on_stream} records; the publisher's filter delivers "
        f"{len(delivered)}, the INSERTs of outbox items ({len(mine)} of this run)"
    )
    t.expect(
        f"{TAG} a handler retried: one OrderCreated per order ({len(orders)}), written with it",
        set(per_order) == orders and set(per_order.values()) == {1} and ran == 2,
    )
    t.expect(
        f"{TAG} the filter lets outbox items through and nothing else",
        all(is_outbox_key(r["dynamodb"]["Keys"]["id"]["S"]) for r in delivered)
        and all(r["eventName"] == "INSERT" for r in delivered),
    )
    return mine


def _publish_and_consume(
    app: LocalApp, t: Transcript, outbox: Outbox, batch: list[dict[str, Any]]
) -> None:
    """Publish the run's events, then consume them from the queue."""
    put_before = sum(app.requests.events_put.values())
    stock_before = _stock(app)
    result = app.call(PUBLISH, stream_event(batch))
    put = sum(app.requests.events_put.values()) - put_before
    t.note(f"{TAG} PublishEvents: {len(batch)} records -> {put} events put, {_failures(result)}")
    t.expect(f"{TAG} every event put once, no failure", put == len(batch) and _ok(result))
    t.expect(f"{TAG} each item marked published", _all_published(app, batch))
    messages = outbox.queue.receive()
    t.note(f"{TAG} the bus's rule delivered {len(messages)} messages to OrderEventsQueue")
    runs, replays = _consume(app, outbox, messages)
    reserved = _stock(app) - stock_before
    expected = _quantities(batch)
    t.note(f"{TAG} ReserveStock ran {runs}x, replayed {replays}x; reserved {_show(reserved)}")
    t.expect(
        f"{TAG} each order's stock reserved once",
        len(messages) == len(batch) and runs == len(batch) and reserved == expected,
    )


def _stream_record_redelivered(
    app: LocalApp, t: Transcript, outbox: Outbox, batch: list[dict[str, Any]]
) -> None:
    """The same stream batch again: nothing is published twice."""
    put_before = sum(app.requests.events_put.values())
    stock_before = _stock(app)
    result = app.call(PUBLISH, stream_event(batch))
    put = sum(app.requests.events_put.values()) - put_before
    messages = outbox.queue.receive()
    _consume(app, outbox, messages)
    t.note(
        f"{TAG} a stream record redelivered: the same {len(batch)} records again -> "
        f"{put} events put, {len(messages)} messages"
    )
    t.expect(
        f"{TAG} published items are not published again",
        put == 0 and not messages and _ok(result) and _stock(app) == stock_before,
    )


def _publisher_killed(app: LocalApp, t: Transcript, outbox: Outbox) -> None:
    """A publisher killed between PutEvents and its mark: two deliveries, one effect."""
    customer = f"ivan-{app.run_id}"
    created = app.post_order(order_body(customer, ("DESK-4", 2, "99.00")), f"order-{app.run_id}-k")
    _, delivered = outbox.read()
    batch = _of_run(delivered, app.run_id)
    t.note(f"{TAG} a new order -> {created.status}; its OrderCreated on the stream")
    put_before = sum(app.requests.events_put.values())
    stock_before = _stock(app)
    outbox.kill.arm()
    try:
        app.call(PUBLISH, stream_event(batch))
        killed = False
    except PublisherKilled:
        killed = True
    put = sum(app.requests.events_put.values()) - put_before
    t.note(
        f"{TAG} PublishEvents killed after PutEvents ({put} event put), before marking it "
        "published; Lambda runs the batch again"
    )
    t.expect(f"{TAG} the item is still unpublished", killed and not _all_published(app, batch))
    result = app.call(PUBLISH, stream_event(batch))
    put = sum(app.requests.events_put.values()) - put_before
    t.expect(
        f"{TAG} the retry put it again ({put} in all), and marked it",
        put == 2 and _ok(result) and _all_published(app, batch),
    )
    messages = outbox.queue.receive()
    # Where event_keys.OUTBOX_EVENT finds it: the id the publisher adds to the detail.
    keys = {str(json.loads(m["body"])["detail"]["outbox"]["id"]) for m in messages}
    runs, replays = _consume(app, outbox, messages)
    reserved = _stock(app) - stock_before
    t.note(
        f"{TAG} OrderEventsQueue: {len(messages)} messages, {len(keys)} event id; "
        f"ReserveStock ran {runs}x, replayed {replays}x; reserved {_show(reserved)}"
    )
    t.expect(
        f"{TAG} delivered twice, deduplicated by the consumer: stock reserved once",
        created.status == 201
        and len(messages) == 2
        and len(keys) == 1
        and (runs, replays) == (1, 1)
        and reserved == _quantities(batch),
    )


def _alarmed_metric(app: LocalApp, t: Transcript, documents: list[dict[str, Any]]) -> None:
    """The publisher's EMF metrics, where the template's outbox alarm looks for them."""
    template = load_template()
    alarm = template["Resources"]["OutboxUnpublishedAgeAlarm"]["Properties"]
    namespace = app.environment["POWERTOOLS_METRICS_NAMESPACE"]
    service = app.environment["POWERTOOLS_SERVICE_NAME"]
    ages = [
        float(document[alarm["MetricName"]])
        for document in documents
        if alarm["MetricName"] in document
        and document.get("service") == service
        and namespace in {d["Namespace"] for d in document["_aws"]["CloudWatchMetrics"]}
    ]
    t.note(
        f"{TAG} metrics: OutboxPublished {metric_total(documents, 'OutboxPublished'):.0f}, "
        f"OutboxAlreadyPublished {metric_total(documents, 'OutboxAlreadyPublished'):.0f}; "
        f"{alarm['MetricName']} in {len(ages)} batches, at most {max(ages, default=0):.1f} s "
        f"(OutboxUnpublishedAgeAlarm: over {alarm['Threshold']} s)"
    )
    t.expect(
        f"{TAG} the publisher reports the age its alarm watches, in {namespace}/{service}",
        bool(ages) and max(ages) < alarm["Threshold"],
    )


# ------------------------------------------------------------------------------------- helpers


def _consume(app: LocalApp, outbox: Outbox, messages: list[dict[str, Any]]) -> tuple[int, int]:
    """Hand ``messages`` to ReserveStock as one batch; return its executions and replays."""
    if not messages:
        return 0, 0
    runs, replays = app.executions(CONSUME), app.replays(CONSUME)
    result = app.call(CONSUME, sqs_event(messages))
    outbox.queue.settle(messages, result)
    return app.executions(CONSUME) - runs, app.replays(CONSUME) - replays


def _detail(record: Mapping[str, Any]) -> dict[str, Any]:
    """The ``detail`` an outbox item's stream record carries (as emitted)."""
    return dict(json.loads(record["dynamodb"]["NewImage"]["outbox_detail"]["S"]))


def _of_run(records: list[dict[str, Any]], run_id: str) -> list[dict[str, Any]]:
    return [r for r in records if str(_detail(r).get("customer_id", "")).endswith(f"-{run_id}")]


def _orders_of_run(app: LocalApp) -> list[dict[str, Any]]:
    """The orders this run created (a fork of the app shares its answers with the others)."""
    return [
        r.body
        for r in app.answers
        if r.status == 201
        and "idempotent-replayed" not in r.headers
        and str(r.body.get("customer_id", "")).endswith(f"-{app.run_id}")
    ]


def _quantities(records: list[dict[str, Any]]) -> Counter[str]:
    """The stock the orders of ``records`` reserve, each once."""
    wanted: Counter[str] = Counter()
    for record in records:
        for line in _detail(record)["items"]:
            wanted[str(line["sku"])] += int(line["quantity"])
    return wanted


def _stock(app: LocalApp) -> Counter[str]:
    """Reserved stock by SKU."""
    pages = app.dynamodb.get_paginator("scan").paginate(
        TableName=app.tables["StockTable"], ConsistentRead=True
    )
    return Counter(
        {
            item["sku"]["S"]: int(Decimal(item["reserved"]["N"]))
            for page in pages
            for item in page["Items"]
        }
    )


def _all_published(app: LocalApp, records: list[dict[str, Any]]) -> bool:
    """Tell whether every outbox item of ``records`` is recorded as published."""
    for record in records:
        item = app.dynamodb.get_item(
            TableName=app.tables["IdempotencyTable"],
            Key=record["dynamodb"]["Keys"],
            ConsistentRead=True,
        ).get("Item", {})
        if "outbox_published_at" not in item:
            return False
    return True


def _ok(result: Any) -> bool:
    return isinstance(result, dict) and result.get("batchItemFailures") == []


def _failures(result: Any) -> str:
    failures = result.get("batchItemFailures") if isinstance(result, dict) else None
    return f"batchItemFailures {failures}"


def _show(reserved: Counter[str]) -> str:
    return ", ".join(f"{sku} {n}" for sku, n in sorted(reserved.items()) if n) or "nothing"
