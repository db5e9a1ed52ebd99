"""The narrated scenario of ``make demo``; ``tests/functional`` runs the same steps under pytest.

Each ``step_*`` drives the handlers of a `samples.local_app.LocalApp` with the events Lambda
would deliver, prints what happens to a `Transcript` and checks it (`Transcript.expect`); a
failed check is counted, never raised, so the whole story is told.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from samples.answers import expect_duplicates, explain_answers
from samples.local_app import (
    FUNCTIONS,
    OTHER_CALLER,
    LocalApp,
    Response,
    order_body,
)
from samples.local_lambda import (
    as_ttl_removal,
    queue_arn,
    redelivered,
    sqs_event,
    sqs_message,
    stream_event,
)
from samples.local_stack import load_template
from samples.outbox_steps import step_outbox
from samples.tracing import step_trace
from samples.watchers import EXECUTED, RUN_METRICS, Transcript, metric_total

if TYPE_CHECKING:
    pass

# --------------------------------------------------------------------------------------- steps


@dataclass(frozen=True, slots=True)
class Orders:
    """The orders step 1 created: ``(order_id, customer_id, total)`` of each."""

    first: tuple[str, str, Decimal]
    concurrent: tuple[str, str, Decimal]
    third: tuple[str, str, Decimal]
    other_caller: tuple[str, str, Decimal]


def step_create_orders(app: LocalApp, t: Transcript) -> Orders:
    """Scenario 1: POST /orders, the retry, another caller, concurrent duplicates, 422, 400."""
    run = app.run_id
    alice, bob, carol = f"alice-{run}", f"bob-{run}", f"carol-{run}"
    t.step("1. CreateOrder: POST /orders with an Idempotency-Key (HTTP API, idempotent_http)")
    body = order_body(alice, ("BOOK-1", 2, "12.50"), ("PEN-7", 1, "3.20"))
    key = f"order-{run}-1"
    runs_before = app.executions("CreateOrderFunction")
    orders_before = app.requests.for_table(app.tables["OrdersTable"])
    first = app.post_order(body, key)
    t.note(f"POST /orders  Idempotency-Key: {key}  -> {first.show()}")
    t.expect("201 Created with an order id", first.status == 201 and "order_id" in first.body)
    first_id = str(first.body.get("order_id", ""))

    again = app.post_order(body, key)
    t.note(f"the same request again                  -> {again.show()}")
    t.expect("same status and body", (again.status, again.body) == (first.status, first.body))
    t.expect("Idempotent-Replayed: true", again.headers.get("idempotent-replayed") == "true")
    t.expect("the handler ran once", app.executions("CreateOrderFunction") - runs_before == 1)

    carol_body = order_body(carol, ("LAMP-2", 2, "40.00"))
    theirs = app.post_order(carol_body, key, caller=OTHER_CALLER)
    t.note(f"the same key, sent by another user       -> {theirs.show()}")
    t.expect(
        "a new order of theirs: keys are scoped by the caller's JWT sub",
        theirs.status == 201
        and "idempotent-replayed" not in theirs.headers
        and theirs.body.get("order_id") not in (None, first_id),
    )

    bob_id = _concurrent_duplicates(app, t, bob)

    changed = app.post_order(order_body(alice, ("BOOK-1", 9, "12.50")), key)
    t.note(f"first key, different body              -> {changed.show()}")
    t.expect("422 problem+json", _is_problem(changed, 422))

    missing = app.post_order(body, None)
    t.note(f"no Idempotency-Key                     -> {missing.show()}")
    t.expect("400 problem+json", _is_problem(missing, 400))

    bad_key = f"order-{run}-bad"
    invalid = app.post_order({"customer_id": alice, "currency": "EUR", "items": []}, bad_key)
    t.note(f"invalid body (no items)                -> {invalid.show()}")
    t.expect("400 problem+json naming the field", _is_problem(invalid, 400) and _names(invalid))

    third_body = order_body(alice, ("LAMP-2", 1, "40.00"))
    third = app.post_order(third_body, f"order-{run}-3")
    t.note(f"another order for {alice}       -> {third.show()}")
    t.expect("201 Created", third.status == 201)
    _expect_atomic_commits(app, t, orders_before, orders=4)
    return Orders(
        first=(first_id, alice, Decimal("28.20")),
        concurrent=(bob_id, bob, Decimal("24.00")),
        third=(str(third.body.get("order_id", "")), alice, Decimal("40.00")),
        other_caller=(str(theirs.body.get("order_id", "")), carol, Decimal("80.00")),
    )


def _concurrent_duplicates(app: LocalApp, t: Transcript, bob: str) -> str:
    """Send ten duplicates of a new order at once, then one more; return the order id."""
    bob_body = order_body(bob, ("MUG-3", 3, "8.00"))
    bob_key = f"order-{app.run_id}-2"
    before = app.executions("CreateOrderFunction")
    outcomes_before = app.decisions.outcomes(FUNCTIONS["CreateOrderFunction"][1])
    barrier = threading.Barrier(10)

    def duplicate() -> Response:
        barrier.wait()
        return app.post_order(bob_body, bob_key)

    with ThreadPoolExecutor(max_workers=10) as pool:
        responses = list(pool.map(lambda _: duplicate(), range(10)))
    statuses = Counter(r.status for r in responses)
    t.note(
        f"10 concurrent duplicates of a new request -> statuses {dict(sorted(statuses.items()))}"
    )
    late = app.post_order(bob_body, bob_key)
    t.note(f"once more, after all ten answered       -> {late.show()}")
    outcomes = app.decisions.outcomes(FUNCTIONS["CreateOrderFunction"][1]) - outcomes_before
    t.expect("the handler ran exactly once", app.executions("CreateOrderFunction") - before == 1)
    t.expect("exactly one order row in OrdersTable", len(app.orders_of(bob)) == 1)
    expect_duplicates(
        t, responses, late, replays=outcomes["REPLAYED"], refusals=outcomes["IN_PROGRESS"]
    )
    created = [r for r in responses if r.status == 201]
    return str(created[0].body["order_id"]) if created else ""


def _expect_atomic_commits(
    app: LocalApp, t: Transcript, before: Counter[str], *, orders: int
) -> None:
    """Check that each new order was written with its record, in one TransactWriteItems."""
    after = app.requests.for_table(app.tables["OrdersTable"])
    commits = after["TransactWriteItems"] - before["TransactWriteItems"]
    t.expect(
        f"each order committed with its record in one TransactWriteItems "
        f"({commits} for {orders} orders)",
        commits == orders and after["PutItem"] == before["PutItem"],
    )


def step_payments(app: LocalApp, t: Transcript, orders: Orders) -> None:
    """Scenario 2: a payments batch with a producer duplicate and a poison message, redelivered."""
    t.step("2. ProcessPayment: an SQS batch (idempotent_sqs_handler, key = body.payment_id)")
    arn = queue_arn("PaymentsQueue")
    run = app.run_id
    payments = [
        {"payment_id": f"pay-{run}-1", "order_id": orders.first[0], "amount": "28.20"},
        {"payment_id": f"pay-{run}-2", "order_id": orders.concurrent[0], "amount": "24.00"},
        {"payment_id": f"pay-{run}-1", "order_id": orders.first[0], "amount": "28.20"},
        {"payment_id": f"pay-{run}-x", "order_id": "ord_does_not_exist", "amount": "1.00"},
    ]
    batch = [sqs_message(payment, queue_arn=arn) for payment in payments]
    poison = batch[3]["messageId"]
    t.note("batch: pay order 1, pay order 2, pay order 1 again (the producer retried: a new")
    t.note(
        "       message id, the same payment_id), and a payment for an order that does not exist"
    )
    before_runs = app.executions("ProcessPaymentFunction")
    result = app.call("ProcessPaymentFunction", sqs_event(batch))
    failed = [item["itemIdentifier"] for item in result["batchItemFailures"]]
    t.note(f"-> batchItemFailures: {failed}")
    t.expect("batchItemFailures names exactly the poison message", failed == [poison])
    runs = app.executions("ProcessPaymentFunction") - before_runs
    t.expect(f"the body ran 3 times for 4 messages (ran {runs})", runs == 3)
    paid = [app.order(order_id) or {} for order_id in (orders.first[0], orders.concurrent[0])]
    t.expect(
        "both orders PAID, each updated once (version 2)",
        all(o.get("status") == "PAID" and o.get("version") == 2 for o in paid),
    )

    t.note("the whole batch is delivered again (as after a timeout): the same four messages")
    before_runs, before_replays = (
        app.executions("ProcessPaymentFunction"),
        app.replays("ProcessPaymentFunction"),
    )
    result = app.call("ProcessPaymentFunction", sqs_event([redelivered(r) for r in batch]))
    failed = [item["itemIdentifier"] for item in result["batchItemFailures"]]
    runs = app.executions("ProcessPaymentFunction") - before_runs
    replays = app.replays("ProcessPaymentFunction") - before_replays
    t.note(f"-> batchItemFailures: {failed}; body ran {runs}x, replayed {replays}x")
    t.expect("only the poison message was processed again", runs == 1 and replays == 3)
    t.expect("and it is the only failure again", failed == [poison])
    t.expect(
        "the orders were not updated again",
        all((app.order(o[0]) or {}).get("version") == 2 for o in (orders.first, orders.concurrent)),
    )
    receive_count = _max_receive_count()
    t.note(f"SQS moves it to PaymentsDeadLetterQueue after maxReceiveCount={receive_count} tries")


def step_projection(app: LocalApp, t: Transcript, orders: Orders) -> None:
    """Scenario 3: the real stream records into ProjectOrders, twice; a TTL removal."""
    t.step("3. ProjectOrders: the OrdersTable stream (idempotent_stream_handler)")
    records = [record for record in app.stream.read() if _of_run(record, app.run_id)]
    kinds = Counter(record["eventName"] for record in records)
    t.note(f"read {len(records)} records from the DynamoDB Streams API: {dict(kinds)}")
    t.expect(
        "4 orders created and 2 paid: 4 INSERT + 2 MODIFY",
        kinds == Counter({"INSERT": 4, "MODIFY": 2}),
    )
    result = app.call("ProjectOrdersFunction", stream_event(records))
    t.expect("no batchItemFailures", result == {"batchItemFailures": []})
    alice, bob, carol = orders.first[1], orders.concurrent[1], orders.other_caller[1]
    alice_totals, bob_totals = app.totals(alice), app.totals(bob)
    t.note(f"{alice}: {_show_totals(alice_totals)}")
    t.note(f"{bob}:   {_show_totals(bob_totals)}")
    t.note(f"{carol}: {_show_totals(app.totals(carol))}")
    t.expect(
        f"{alice}: 2 orders (68.20 EUR), 1 paid (28.20 EUR)",
        alice_totals
        == {
            "customer_id": alice,
            "ordered_count": 2,
            "ordered_total_EUR": Decimal("68.20"),
            "paid_count": 1,
            "paid_total_EUR": Decimal("28.20"),
        },
    )
    t.expect(
        f"{carol}: 1 order (80.00 EUR), made with alice's key by another user, unpaid",
        app.totals(carol)
        == {"customer_id": carol, "ordered_count": 1, "ordered_total_EUR": Decimal("80.00")},
    )
    t.expect(
        f"{bob}: 1 order (24.00 EUR), paid",
        bob_totals
        == {
            "customer_id": bob,
            "ordered_count": 1,
            "ordered_total_EUR": Decimal("24.00"),
            "paid_count": 1,
            "paid_total_EUR": Decimal("24.00"),
        },
    )

    t.note("the same batch delivered again (a retry, a bisected batch, a re-read):")
    before_runs = app.executions("ProjectOrdersFunction")
    result = app.call("ProjectOrdersFunction", stream_event(records))
    runs = app.executions("ProjectOrdersFunction") - before_runs
    t.expect("no batchItemFailures", result == {"batchItemFailures": []})
    t.expect(f"no record processed twice (body ran {runs}x)", runs == 0)
    t.expect("totals unchanged", (app.totals(alice), app.totals(bob)) == (alice_totals, bob_totals))

    t.note("an order ages out: moto does not run TTL, so the demo deletes it and marks the real")
    t.note("REMOVE record as DynamoDB's TTL process marks its own (userIdentity dynamodb...)")
    app.dynamodb.delete_item(
        TableName=app.tables["OrdersTable"], Key={"order_id": {"S": orders.third[0]}}
    )
    removals = [as_ttl_removal(r) for r in app.stream.read() if _of_run(r, app.run_id)]
    t.expect("one REMOVE record on the stream", [r["eventName"] for r in removals] == ["REMOVE"])
    result = app.call("ProjectOrdersFunction", stream_event(removals))
    t.expect("no batchItemFailures", result == {"batchItemFailures": []})
    t.expect("TTL removal ignored: totals unchanged", app.totals(alice) == alice_totals)


def step_summary(app: LocalApp, t: Transcript) -> None:
    """Scenario 4: executions against invocations, and DynamoDB requests."""
    t.step("5. Summary")
    t.note(f"{'function':<24}{'invocations':>12}{'requests':>10}{'ran':>6}{'replayed':>10}")
    for function, (_, prefix) in FUNCTIONS.items():
        t.note(
            f"{function:<24}{app.invocations[function]:>12}{app.records[function]:>10}"
            f"{app.decisions.executions(prefix):>6}{app.decisions.replays(prefix):>10}"
        )
    t.note("(requests: HTTP requests, or the records in the batches)")
    explain_answers(t, "CreateOrderFunction", app.answers)
    t.note("(a TransactWriteItems counts once on each table it writes)")
    idempotency_table = app.tables["IdempotencyTable"]
    for logical_id, name in app.tables.items():
        ops = app.requests.for_table(name)
        shown = ", ".join(f"{op} {n}" for op, n in sorted(ops.items())) or "none"
        t.note(f"DynamoDB requests on {logical_id:<20} {sum(ops.values()):>4}  ({shown})")
    for logical_id, name in app.buckets.items():
        ops = app.requests.for_table(name)
        shown = (
            ", ".join(f"{op} {n}" for op, n in sorted(ops.items()))
            or "none: no result too large for an item"
        )
        t.note(f"S3 requests on {logical_id:<26} {sum(ops.values()):>4}  ({shown})")
    documents = app.metrics.documents
    decisions = app.decisions.decisions
    ran = [d for d in decisions if d["outcome"] in EXECUTED]
    replays = sum(d["outcome"] == "REPLAYED" for d in decisions)
    run_metrics = {name: metric_total(documents, name) for name in RUN_METRICS}
    shown = " + ".join(f"{name} {n:.0f}" for name, n in run_metrics.items() if n) or "none"
    t.note(
        f"metrics (Powertools EMF): {len(documents)} documents; runs: {shown}; "
        f"Replayed {metric_total(documents, 'Replayed'):.0f}"
    )
    t.expect(
        f"the metrics count every run and every replay in the table above "
        f"({len(ran)} ran, {replays} replayed)",
        (sum(run_metrics.values()), metric_total(documents, "Replayed")) == (len(ran), replays),
    )
    store_calls = sum(int(d.get("store_calls", 0)) for d in decisions)
    # The publisher's reads and "published" marks are on outbox items, not records.
    on_records = app.requests.for_table(idempotency_table) - Counter(
        {op: n for (table, op), n in app.requests.outbox.items() if table == idempotency_table}
    )
    on_table, batch_reads = sum(on_records.values()), on_records["BatchGetItem"]
    t.expect(
        f"every request on IdempotencyTable's records is an accounted decision or a batch's "
        f"read of all its keys ({on_table}, {batch_reads} batch reads)",
        store_calls + batch_reads == on_table,
    )
    replayed = [d for d in decisions if d["outcome"] == "REPLAYED"]
    # A commit that failed (step 4 injects one) is a third request: claim, transaction, release.
    failed_commits = [d for d in ran if d["outcome"] == "RELEASED" and d.get("error")]
    t.expect(
        f"each execution cost 2 requests, or 3 when its commit failed and it was released "
        f"({len(ran)} executions, {len(failed_commits)} failed commit)",
        all(int(d.get("store_calls", 0)) == 2 + (d in failed_commits) for d in ran),
    )
    t.expect(
        f"each replay cost 1 request, or none when its batch's read found it "
        f"({len(replayed)} replays)",
        all(
            int(d.get("store_calls", 0)) == (0 if d.get("source") == "batch_read" else 1)
            for d in replayed
        ),
    )


def run_scenario(app: LocalApp, t: Transcript) -> None:
    """Play every step."""
    orders = step_create_orders(app, t)
    step_payments(app, t, orders)
    step_projection(app, t, orders)
    step_outbox(app, t)
    step_summary(app, t)
    step_trace(app, t)


# ------------------------------------------------------------------------------------- helpers


def _is_problem(response: Response, status: int) -> bool:
    return (
        response.status == status
        and response.headers.get("content-type") == "application/problem+json"
        and isinstance(response.body, dict)
        and response.body.get("status") == status
        and {"type", "title", "detail"} <= set(response.body)
    )


def _names(response: Response) -> bool:
    errors = response.body.get("errors") if isinstance(response.body, dict) else None
    return isinstance(errors, list) and bool(errors) and all("field" in e for e in errors)


def _of_run(record: Mapping[str, Any], run_id: str) -> bool:
    """Tell whether a stream record is about an order of this run (its customer ids end so)."""
    change = record["dynamodb"]
    image = change.get("NewImage") or change.get("OldImage") or {}
    return str(image.get("customer_id", {}).get("S", "")).endswith(f"-{run_id}")


def _show_totals(totals: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(totals.items()) if k != "customer_id")


def _max_receive_count() -> int:
    queue = load_template()["Resources"]["PaymentsQueue"]["Properties"]
    return int(queue["RedrivePolicy"]["maxReceiveCount"])
