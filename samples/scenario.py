"""The narrated scenario of ``make demo``; ``tests/functional`` runs the same steps under pytest.

`start_app` creates the tables from ``template.yaml`` on a DynamoDB endpoint (its bucket on an
S3 endpoint, and its event bus, rule and queue on EventBridge and SQS endpoints, when there are
some), points the handlers of `samples.app` at them through the environment the template defines,
and returns a `LocalApp`. Each ``step_*`` drives the
handlers with the events Lambda would deliver, prints what happens to a `Transcript` and checks it
(`Transcript.expect`); a failed check is counted, never raised, so the whole story is told.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TextIO

import boto3

from idempotent_lambda.testing import TableStream
from samples.answers import expect_duplicates, explain_answers
from samples.local_lambda import (
    FailNextCommit,
    Handler,
    KillAfterPutEvents,
    QueueReader,
    as_ttl_removal,
    filter_records,
    http_api_event,
    invoke,
    is_outbox_key,
    load_handler,
    queue_arn,
    redelivered,
    sqs_event,
    sqs_message,
    stream_event,
)
from samples.local_stack import create_stack, load_template
from samples.tracing import step_trace

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

#: Outcomes after which the handler body had run (see `idempotent_lambda.Outcome`).
EXECUTED = frozenset(
    {"CLAIMED", "TAKEN_OVER", "RELEASED", "RELEASE_FAILED", "LEASE_LOST", "COMPLETE_FAILED"}
)
#: The decision metrics of those outcomes (`idempotent_lambda.metrics`): one per body run.
RUN_METRICS = ("Claimed", "TakenOver", "Released", "ReleaseFailed", "LeaseLost", "CompleteFailed")
#: The ``sub`` of the signed-in user the demo's requests come from (template.yaml's JWT
#: authorizer passes it; `idempotent_http` scopes keys by it), and of a second user.
CALLER = "user-1"
OTHER_CALLER = "user-2"
#: The sample's functions: logical id in template.yaml, handler, key prefix in the app.
FUNCTIONS = {
    "CreateOrderFunction": ("samples.app.create_order", "orders.create_order"),
    "ProcessPaymentFunction": ("samples.app.process_payment", "orders.process_payment"),
    "ProjectOrdersFunction": ("samples.app.project_orders", "orders.project_orders"),
    "ReserveStockFunction": ("samples.app.reserve_stock", "orders.reserve_stock"),
}
#: The outbox's publisher: no idempotency record of its own (it marks outbox items published).
PUBLISHER = ("PublishEventsFunction", "samples.app.publish_events")
#: The outbox's sweeper, run on a schedule: it publishes what the stream did not bring.
SWEEPER = ("SweepOutboxFunction", "samples.app.sweep_outbox")


class Transcript:
    """Print numbered steps and checks; remember the checks that failed."""

    def __init__(self, out: Callable[[str], None] = print) -> None:
        self.out = out
        self.failures: list[str] = []
        self.checks = 0

    def step(self, text: str) -> None:
        """Print a scenario step."""
        self.out(f"\n== {text}")

    def note(self, text: str) -> None:
        """Print a detail line."""
        self.out(f"   {text}")

    def expect(self, what: str, ok: bool) -> bool:
        """Print a check, count it if it failed, and return ``ok``."""
        self.checks += 1
        self.out(f"   [{'ok' if ok else 'FAILED'}] {what}")
        if not ok:
            self.failures.append(what)
        return ok


class MetricsOutput:
    """Taps stdout while the app's functions run: keeps EMF documents, passes the rest through.

    In Lambda, the functions' metrics (Powertools ``@metrics.log_metrics``, carrying the
    library's decision metrics) are JSON documents on stdout that CloudWatch turns into metrics.
    Locally they would bury the narration, so they are kept in ``documents`` to be counted.
    The tap is installed while at least one invocation runs (`tapping`), from any thread.
    """

    def __init__(self) -> None:
        self.documents: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._users = 0
        self._target: TextIO = sys.stdout
        self._swallow_newline = threading.local()  # print() writes its newline separately

    @contextmanager
    def tapping(self) -> Iterator[None]:
        """Route stdout through this object while the block runs."""
        with self._lock:
            if self._users == 0:
                self._target = sys.stdout
                sys.stdout = self  # type: ignore[assignment]
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    sys.stdout = self._target

    def write(self, text: str) -> int:
        """Keep ``text`` if it is an EMF document, else write it to the real stdout."""
        with self._lock:
            if text.startswith('{"_aws"'):
                self.documents.append(json.loads(text))
                self._swallow_newline.value = True
            elif text == "\n" and getattr(self._swallow_newline, "value", False):
                self._swallow_newline.value = False
            else:
                self._swallow_newline.value = False
                self._target.write(text)
        return len(text)

    def flush(self) -> None:
        """Flush the real stdout."""
        self._target.flush()


def metric_total(documents: list[dict[str, Any]], metric: str) -> float:
    """Sum the values of ``metric`` over EMF ``documents``."""
    found = 0.0
    for document in documents:
        value = document.get(metric, 0)
        found += sum(value) if isinstance(value, list) else float(value)
    return found


class DecisionLog(logging.Handler):
    """Collect the library's decisions (one log record each on ``idempotent_lambda``)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.decisions: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the decision fields of ``record``, if it is a decision."""
        fields = getattr(record, "idempotency", None)
        if isinstance(fields, dict):
            self.decisions.append(dict(fields))

    def outcomes(self, key_prefix: str) -> Counter[str]:
        """Count the outcomes of one function, by the key prefix it uses."""
        return Counter(
            d["outcome"] for d in self.decisions if str(d.get("key", "")).startswith(key_prefix)
        )

    def executions(self, key_prefix: str) -> int:
        """Count how often the function's body ran."""
        return sum(n for outcome, n in self.outcomes(key_prefix).items() if outcome in EXECUTED)

    def replays(self, key_prefix: str) -> int:
        """Count how often the function's stored result was replayed."""
        return self.outcomes(key_prefix)["REPLAYED"]


class RequestCounter:
    """Count a boto3 session's DynamoDB requests by table and S3 requests by bucket.

    A ``TransactWriteItems`` counts once on every table it writes (CreateOrder's writes the
    order and the idempotency record in one request).
    """

    def __init__(self, session: boto3.session.Session) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        #: The requests on outbox items only (the publisher's reads and marks), by table and
        #: operation: they are no idempotency decision's.
        self.outbox: Counter[tuple[str, str]] = Counter()
        #: The ``TransactItems`` of every transaction sent, in order.
        self.transactions: list[list[dict[str, Any]]] = []
        #: Entries sent with ``PutEvents``, by bus.
        self.events_put: Counter[str] = Counter()
        self._lock = threading.Lock()
        session.events.register("before-parameter-build.dynamodb", self._seen)
        session.events.register("before-parameter-build.s3", self._seen_s3)
        session.events.register("before-parameter-build.events.PutEvents", self._seen_events)

    def _seen_events(self, params: Mapping[str, Any], **_: Any) -> None:
        with self._lock:
            for entry in params.get("Entries", []):
                self.events_put[str(entry.get("EventBusName", "default"))] += 1
            self.counts["events", "PutEvents"] += 1

    def _seen_s3(self, params: Mapping[str, Any], event_name: str, **_: Any) -> None:
        with self._lock:
            self.counts[str(params.get("Bucket", "-")), event_name.rsplit(".", 1)[-1]] += 1

    def _seen(self, params: Mapping[str, Any], event_name: str, **_: Any) -> None:
        operation = event_name.rsplit(".", 1)[-1]
        tables = {str(params.get("TableName", "-"))}
        if "RequestItems" in params:  # BatchGetItem: one request on every table it reads
            tables = {str(name) for name in params["RequestItems"]}
        writes = params.get("TransactItems")
        if writes is not None:
            tables = {
                str(body.get("TableName", "-")) for write in writes for body in write.values()
            }
        keys = [params.get("Key")] if "Key" in params else []
        for request in params.get("RequestItems", {}).values():
            keys.extend(request.get("Keys", []))
        on_outbox = bool(keys) and all(
            is_outbox_key((key or {}).get("id", {}).get("S", "")) for key in keys
        )
        with self._lock:
            for table in tables:
                self.counts[table, operation] += 1
                if on_outbox:
                    self.outbox[table, operation] += 1
            if writes is not None:
                self.transactions.append(list(writes))

    def for_table(self, table: str) -> Counter[str]:
        """Count the requests on ``table`` (or bucket) by operation."""
        return Counter({op: n for (name, op), n in self.counts.items() if name == table})


_SHOWN_HEADERS = ("idempotent-replayed", "retry-after")


@dataclass(frozen=True, slots=True)
class Response:
    """An HTTP response as the handler returned it, body parsed."""

    status: int
    headers: dict[str, str]
    body: Any

    @classmethod
    def of(cls, result: Mapping[str, Any]) -> Response:
        """Read a proxy handler's result."""
        headers = {name.lower(): str(value) for name, value in result.get("headers", {}).items()}
        text = result.get("body") or "null"
        return cls(int(result["statusCode"]), headers, json.loads(text))

    def show(self) -> str:
        """Summarise for the transcript."""
        shown = {k: v for k, v in self.headers.items() if k in _SHOWN_HEADERS}
        body = self.body
        if isinstance(body, dict) and "order_id" in body:
            body = {k: body[k] for k in ("order_id", "status", "total") if k in body}
        elif isinstance(body, dict) and "title" in body:
            body = {"title": body["title"]}
        return f"{self.status} {json.dumps(body)}" + (f" {shown}" if shown else "")


@dataclass
class LocalApp:
    """The three functions of the sample running against local tables, and what watches them."""

    handlers: dict[str, Handler]
    dynamodb: DynamoDBClient
    tables: dict[str, str]
    buckets: dict[str, str]
    s3: Any
    environment: dict[str, str]
    stream: TableStream
    decisions: DecisionLog
    requests: RequestCounter
    run_id: str
    #: The outbox: its stream (filtered as the publisher's mapping filters), the consumer's
    #: queue, the fault that kills the publisher. None without EventBridge and SQS endpoints.
    outbox: Outbox | None = None
    #: Event bus name by logical id (named even without an EventBridge endpoint).
    buses: dict[str, str] = field(default_factory=dict)
    invocations: Counter[str] = field(default_factory=Counter)
    #: The functions' EMF metric documents (`MetricsOutput`).
    metrics: MetricsOutput = field(default_factory=MetricsOutput)
    records: Counter[str] = field(default_factory=Counter)
    #: Every answer of ``POST /orders``, in order.
    answers: list[Response] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def fork(self) -> LocalApp:
        """Return the same app under a new run id (fresh keys, customers and orders)."""
        return dataclasses.replace(self, run_id=uuid.uuid4().hex[:8])

    def call(self, function: str, event: Any) -> Any:
        """Invoke one function as Lambda would, counting the invocation."""
        with self._lock:
            self.invocations[function] += 1
            self.records[function] += len(event.get("Records", [])) or 1
        with self.metrics.tapping():
            return invoke(self.handlers[function], event, function_name=function)

    def post_order(self, body: Any, key: str | None, *, caller: str = CALLER) -> Response:
        """``POST /orders`` with ``body`` and the ``Idempotency-Key`` header (None: omitted).

        The request comes from the signed-in user ``caller``, as the template's authorizer lets
        through only requests with a valid token.
        """
        headers = {} if key is None else {"Idempotency-Key": key}
        event = http_api_event("POST", "/orders", body=body, headers=headers, caller=caller)
        try:
            response = Response.of(self.call("CreateOrderFunction", event))
        except Exception:
            with self._lock:  # API Gateway answers a failed invocation with a 500 of its own
                self.answers.append(Response(500, {}, {"message": "Internal Server Error"}))
            raise
        with self._lock:
            self.answers.append(response)
        return response

    def executions(self, function: str) -> int:
        """How often ``function``'s body ran."""
        return self.decisions.executions(FUNCTIONS[function][1])

    def replays(self, function: str) -> int:
        """How often ``function``'s stored result was replayed."""
        return self.decisions.replays(FUNCTIONS[function][1])

    def order(self, order_id: str) -> dict[str, Any] | None:
        """Read an order item (plain values)."""
        item = self.dynamodb.get_item(
            TableName=self.tables["OrdersTable"], Key={"order_id": {"S": order_id}}
        ).get("Item")
        return None if item is None else _plain(item)

    def orders_of(self, customer_id: str) -> list[dict[str, Any]]:
        """Scan the orders of ``customer_id``."""
        pages = self.dynamodb.get_paginator("scan").paginate(
            TableName=self.tables["OrdersTable"],
            FilterExpression="customer_id = :c",
            ExpressionAttributeValues={":c": {"S": customer_id}},
        )
        return [_plain(item) for page in pages for item in page["Items"]]

    def totals(self, customer_id: str) -> dict[str, Any]:
        """Read a customer's totals item, without its ``updated_at``."""
        item = self.dynamodb.get_item(
            TableName=self.tables["CustomerTotalsTable"],
            Key={"customer_id": {"S": customer_id}},
            ConsistentRead=True,
        ).get("Item", {})
        return {k: v for k, v in _plain(item).items() if k != "updated_at"}


@dataclass(frozen=True, slots=True)
class Outbox:
    """What the outbox step drives: the stream, the consumer's queue, a fault to inject.

    Attributes:
        stream: ``IdempotencyTable``'s stream.
        filters: The publisher's mapping's filter patterns (template.yaml), applied to it.
        queue: ``OrderEventsQueue``, which the bus's rule feeds.
        kill: Kills the publisher between ``PutEvents`` and marking its items published.
        fail_commit: Fails the next transaction of a function (after its body ran).
    """

    stream: TableStream
    filters: list[str]
    queue: QueueReader
    kill: KillAfterPutEvents
    fail_commit: FailNextCommit

    def read(self) -> tuple[int, list[dict[str, Any]]]:
        """Return how many records the stream had since the last read, and those delivered."""
        records = self.stream.read()
        return len(records), filter_records(records, self.filters)


def build_app(
    endpoint_url: str,
    *,
    s3_endpoint_url: str | None = None,
    events_endpoint_url: str | None = None,
    table_prefix: str = "idempotent-lambda-demo-",
) -> LocalApp:
    """Create the tables from template.yaml at ``endpoint_url`` and load the handlers onto them.

    With ``s3_endpoint_url`` (moto serves S3 on its DynamoDB endpoint too), the template's
    bucket is created there and the handlers offload large results to it, as deployed; without
    it, ``LARGE_RESULTS_BUCKET`` is unset and a result too large for an item stays the
    documented error. With ``events_endpoint_url`` (moto serves EventBridge and SQS there too),
    the event bus, its rule and the queue it feeds are created there, and the publisher puts
    the outbox's events on that bus; without it the outbox step is skipped.

    The handlers read their configuration from the environment, as in Lambda: this sets the
    template's function environment (table and bucket names, parameter defaults) and
    ``AWS_ENDPOINT_URL_DYNAMODB`` (and ``AWS_ENDPOINT_URL_S3``) in ``os.environ`` (also kept in
    `LocalApp.environment`). The handler modules are imported once per process, so one process
    drives one endpoint and one set of tables.
    """
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    session = boto3.session.Session(region_name=region)
    dynamodb = session.client("dynamodb", endpoint_url=endpoint_url)
    s3 = None if s3_endpoint_url is None else session.client("s3", endpoint_url=s3_endpoint_url)
    events = sqs = None
    if events_endpoint_url is not None:
        events = session.client("events", endpoint_url=events_endpoint_url)
        sqs = session.client("sqs", endpoint_url=events_endpoint_url)
    template = load_template()
    stack = create_stack(
        dynamodb, prefix=table_prefix, s3=s3, events=events, sqs=sqs, template=template
    )
    environment = {
        **stack.environment,
        "AWS_ENDPOINT_URL_DYNAMODB": endpoint_url,
        "AWS_DEFAULT_REGION": region,
    }
    if s3_endpoint_url is not None:
        environment["AWS_ENDPOINT_URL_S3"] = s3_endpoint_url
    if events_endpoint_url is not None:
        environment["AWS_ENDPOINT_URL_EVENTBRIDGE"] = events_endpoint_url
        environment["AWS_ENDPOINT_URL_SQS"] = events_endpoint_url
    os.environ.update(environment)
    stream_arn = dynamodb.describe_table(TableName=stack.tables["OrdersTable"])["Table"][
        "LatestStreamArn"
    ]
    streams = session.client("dynamodbstreams", endpoint_url=endpoint_url)
    from samples.app import aws

    # Hooked on the functions' session before their clients exist (the publisher makes its
    # EventBridge client at import): clients copy the session's hooks when they are made.
    requests = RequestCounter(aws.SESSION)
    kill = KillAfterPutEvents(aws.SESSION)
    fail_commit = FailNextCommit(aws.SESSION)
    modules = {function: module for function, (module, _) in FUNCTIONS.items()}
    modules.update((PUBLISHER, SWEEPER))
    handlers = {function: load_handler(f"{module}.handler") for function, module in modules.items()}
    outbox = None
    if sqs is not None:
        idempotency_stream = dynamodb.describe_table(TableName=stack.tables["IdempotencyTable"])[
            "Table"
        ]["LatestStreamArn"]
        outbox = Outbox(
            stream=TableStream(idempotency_stream, client=streams),
            filters=outbox_filters(template),
            queue=QueueReader(sqs, stack.queues["OrderEventsQueue"]),
            kill=kill,
            fail_commit=fail_commit,
        )
    return LocalApp(
        handlers=handlers,
        dynamodb=dynamodb,
        tables=stack.tables,
        buckets=stack.buckets,
        s3=s3,
        environment=environment,
        stream=TableStream(stream_arn, client=streams),
        decisions=DecisionLog(),
        requests=requests,
        run_id=uuid.uuid4().hex[:8],
        outbox=outbox,
        buses=stack.buses,
    )


def outbox_filters(template: Mapping[str, Any]) -> list[str]:
    """Return the filter patterns of the publisher's event source mapping in ``template``."""
    mapping = template["Resources"]["OutboxStreamEventSourceMapping"]["Properties"]
    return [str(f["Pattern"]) for f in mapping["FilterCriteria"]["Filters"]]


@contextmanager
def watching(app: LocalApp) -> Iterator[LocalApp]:
    """Collect the library's decisions and the functions' metrics while the block runs.

    The functions log through a Powertools ``Logger`` (the library's decision lines too, through
    ``IdempotencyConfig(logger=...)``): its JSON lines are collected as decisions and only
    warnings are printed. Their EMF metric documents are kept in ``app.metrics`` as they run.
    """
    library_logger = logging.getLogger("idempotent_lambda")
    service_logger = logging.getLogger(app.environment.get("POWERTOOLS_SERVICE_NAME", "orders"))
    previous_level = library_logger.level
    quieted = [(handler, handler.level) for handler in service_logger.handlers]
    for handler, _ in quieted:
        handler.setLevel(logging.WARNING)
    for watched in (library_logger, service_logger):
        watched.addHandler(app.decisions)
    library_logger.setLevel(logging.INFO)
    try:
        yield app
    finally:
        for watched in (library_logger, service_logger):
            watched.removeHandler(app.decisions)
        for handler, level in quieted:
            handler.setLevel(level)
        library_logger.setLevel(previous_level)


@contextmanager
def start_app(
    endpoint_url: str, s3_endpoint_url: str | None = None, events_endpoint_url: str | None = None
) -> Iterator[LocalApp]:
    """`build_app` on ``endpoint_url`` (and the S3 and EventBridge/SQS endpoints), `watching` it."""
    app = build_app(
        endpoint_url, s3_endpoint_url=s3_endpoint_url, events_endpoint_url=events_endpoint_url
    )
    with watching(app) as watched:
        yield watched


# --------------------------------------------------------------------------------------- steps


@dataclass(frozen=True, slots=True)
class Orders:
    """The orders step 1 created: ``(order_id, customer_id, total)`` of each."""

    first: tuple[str, str, Decimal]
    concurrent: tuple[str, str, Decimal]
    third: tuple[str, str, Decimal]
    other_caller: tuple[str, str, Decimal]


def order_body(customer_id: str, *lines: tuple[str, int, str]) -> dict[str, Any]:
    """Return a ``POST /orders`` body with ``(sku, quantity, unit_price)`` lines in EUR."""
    items = [{"sku": s, "quantity": q, "unit_price": p} for s, q, p in lines]
    return {"customer_id": customer_id, "currency": "EUR", "items": items}


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
    from samples.outbox_steps import step_outbox

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


def _plain(item: Mapping[str, Any]) -> dict[str, Any]:
    """Deserialise a low-level item (numbers come back as Decimal, which compare with ints)."""
    from boto3.dynamodb.types import TypeDeserializer

    deserializer = TypeDeserializer()
    return {name: deserializer.deserialize(value) for name, value in item.items()}
