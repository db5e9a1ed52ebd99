"""The sample app running locally: its functions on local tables, and what watches them.

`start_app` creates the tables from ``template.yaml`` on a DynamoDB endpoint (its bucket on an
S3 endpoint, and its event bus, rule and queue on EventBridge and SQS endpoints, when there are
some), points the handlers of `samples.app` at them through the environment the template defines,
and returns a `LocalApp`. The narrated scenario (`samples.scenario`) and ``tests/functional``
drive it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import boto3

from idempotent_lambda.testing import TableStream
from samples.local_lambda import (
    FailNextCommit,
    Handler,
    KillAfterPutEvents,
    QueueReader,
    filter_records,
    http_api_event,
    invoke,
    load_handler,
)
from samples.local_stack import create_stack, load_template
from samples.watchers import DecisionLog, MetricsOutput, RequestCounter

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

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


def order_body(customer_id: str, *lines: tuple[str, int, str]) -> dict[str, Any]:
    """Return a ``POST /orders`` body with ``(sku, quantity, unit_price)`` lines in EUR."""
    items = [{"sku": s, "quantity": q, "unit_price": p} for s, q, p in lines]
    return {"customer_id": customer_id, "currency": "EUR", "items": items}


def _plain(item: Mapping[str, Any]) -> dict[str, Any]:
    """Deserialise a low-level item (numbers come back as Decimal, which compare with ints)."""
    from boto3.dynamodb.types import TypeDeserializer

    deserializer = TypeDeserializer()
    return {name: deserializer.deserialize(value) for name, value in item.items()}
