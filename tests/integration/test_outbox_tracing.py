"""One trace from the request to the consumer, through the outbox, on moto's real services.

The request's handler emits an event (DynamoDB, one transaction); the table's stream feeds the
publisher (moto's DynamoDB Streams), which puts the event on EventBridge, whose rule sends it to
an SQS queue; the consumer reads it under `idempotent_sqs_handler` with `OUTBOX_EVENT`. Three
invocations, each under a server span of its own standing for the Lambda instrumentation's,
and the real OpenTelemetry SDK keeping every span in memory.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from idempotent_lambda import IdempotencyConfig, idempotent
from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler
from idempotent_lambda.event_keys import OUTBOX_EVENT
from idempotent_lambda.outbox import emit, publish_handler
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.testing import FakeLambdaContext, TableStream
from samples.local_lambda import redelivered, sqs_event, sqs_message, stream_event
from tests._otel import Traces, is_child
from tests.integration._outbox_stack import client

SECRET = "4111-1111-1111-1111"


@pytest.fixture
def wiring(dynamodb_endpoint: str, dynamodb_client: Any, idempotency_table: str) -> Any:
    """The table's stream, a rule on the default bus that sends shop.orders events to a queue."""
    stream = dynamodb_client.update_table(
        TableName=idempotency_table,
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
    )["TableDescription"]["LatestStreamArn"]
    sqs, events = client("sqs", dynamodb_endpoint), client("events", dynamodb_endpoint)
    name = f"orders-{uuid.uuid4().hex[:8]}"
    queue_url = sqs.create_queue(QueueName=name)["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    events.put_rule(Name=name, EventPattern=json.dumps({"source": ["shop.orders"]}))
    events.put_targets(Rule=name, Targets=[{"Id": "queue", "Arn": queue_arn}])
    reader = TableStream(stream, client=client("dynamodbstreams", dynamodb_endpoint))
    yield reader, sqs, queue_url, queue_arn, events
    events.remove_targets(Rule=name, Ids=["queue"])
    events.delete_rule(Name=name)
    sqs.delete_queue(QueueUrl=queue_url)


def test_one_trace_shows_the_request_the_publication_and_the_consumers_work(
    traces: Traces, wiring: Any, dynamodb_client: Any, idempotency_table: str
) -> None:
    """Request -> emit -> publication -> consumer record -> its work: one trace, parent to
    child; each later invocation's own span is linked; a redelivery replays in the same trace;
    no detail value is in any span."""
    reader, sqs, queue_url, queue_arn, events = wiring
    store = DynamoDBPersistenceLayer(idempotency_table, boto3_client=dynamodb_client)
    emitted: list[str] = []

    @idempotent(
        persistence_store=store,
        config=IdempotencyConfig(event_key_jmespath="order_id"),
        key_prefix="orders",
    )
    def create_order(event: dict[str, Any], context: Any) -> dict[str, Any]:
        detail = {"order_id": event["order_id"], "card": SECRET}
        emitted.append(emit("OrderCreated", detail, source="shop.orders"))
        return {"order_id": event["order_id"]}

    @idempotent_sqs_handler(
        persistence_store=store,
        config=IdempotencyConfig(event_key_jmespath=OUTBOX_EVENT),
        key_prefix="ship",
    )
    def ship(record: SQSRecord, context: Any) -> str:
        with traces.tracer.start_as_current_span("ship order"):
            return "shipped"

    publisher = publish_handler(store, events_client=events)
    tracer = traces.tracer
    with tracer.start_as_current_span("POST /orders", kind=SpanKind.SERVER):
        create_order({"order_id": "o-1", "card": SECRET}, FakeLambdaContext())
    with tracer.start_as_current_span("publisher", kind=SpanKind.SERVER):
        answer = publisher(stream_event(reader.read()), FakeLambdaContext())
    assert [] == answer["batchItemFailures"]
    messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)["Messages"]
    assert 1 == len(messages)
    record = sqs_message(messages[0]["Body"], queue_arn=queue_arn)
    with tracer.start_as_current_span("consumer", kind=SpanKind.SERVER):
        assert [] == ship(sqs_event([record]), FakeLambdaContext())["batchItemFailures"]
    with tracer.start_as_current_span("consumer again", kind=SpanKind.SERVER):
        ship(sqs_event([redelivered(record)]), FakeLambdaContext())

    request = traces.named("POST /orders")
    (emitting,) = [s for s in traces.ours() if s.name == "idempotency orders"]
    publication = traces.named("outbox publish OrderCreated")
    consumed, replayed = [s for s in traces.ours() if s.name == "idempotency sqs ship"]
    work = traces.named("ship order")
    # one trace, parent to child, from the request to the consumer's work
    assert is_child(emitting, request)
    assert is_child(publication, emitting)
    assert is_child(consumed, publication)
    assert is_child(work, consumed)
    assert is_child(replayed, publication)
    assert {request.context.trace_id} == {
        s.context.trace_id for s in (emitting, publication, consumed, replayed, work)
    }
    # each later invocation's own span is linked, not lost
    assert [traces.named("publisher").context] == [link.context for link in publication.links]
    assert [traces.named("consumer").context] == [link.context for link in consumed.links]
    assert SpanKind.PRODUCER == publication.kind
    assert SpanKind.CONSUMER == consumed.kind
    assert emitted[0] == publication.attributes["messaging.message.id"]
    assert emitted[0] == consumed.attributes["messaging.message.id"]
    assert ("CLAIMED", "REPLAYED") == (
        consumed.attributes["idempotency.outcome"],
        replayed.attributes["idempotency.outcome"],
    )
    assert StatusCode.UNSET == publication.status.status_code
    assert not [v for v in traces.every_value() if SECRET in str(v)]


@pytest.mark.no_tracer_provider
def test_without_a_tracer_the_event_goes_out_with_no_trace_context(
    wiring: Any, dynamodb_client: Any, idempotency_table: str
) -> None:
    """No provider: nothing is stored or published beyond the event id."""
    reader, sqs, queue_url, _, events = wiring
    store = DynamoDBPersistenceLayer(idempotency_table, boto3_client=dynamodb_client)

    @idempotent(persistence_store=store, config=IdempotencyConfig(event_key_jmespath="id"))
    def handler(event: dict[str, Any], context: Any) -> None:
        emit("OrderCreated", {"id": event["id"]}, source="shop.orders")

    handler({"id": 1}, FakeLambdaContext())
    records = reader.read()
    image = [r["dynamodb"]["NewImage"] for r in records if "outbox_id" in r["dynamodb"]["NewImage"]]
    assert 1 == len(image)
    assert "outbox_traceparent" not in image[0]
    publish_handler(store, events_client=events)(stream_event(records), FakeLambdaContext())
    body = json.loads(sqs.receive_message(QueueUrl=queue_url)["Messages"][0]["Body"])
    assert ["id"] == list(body["detail"]["outbox"])


def test_a_publication_that_fails_fails_its_span_with_the_error_code(
    traces: Traces, wiring: Any, dynamodb_client: Any, idempotency_table: str
) -> None:
    """An event EventBridge refuses (its bus does not exist): its publication span is an error
    naming EventBridge's code; the record is reported failed, as without tracing."""
    reader, _, _, _, events = wiring
    store = DynamoDBPersistenceLayer(idempotency_table, boto3_client=dynamodb_client)

    @idempotent(persistence_store=store, config=IdempotencyConfig(event_key_jmespath="id"))
    def handler(event: dict[str, Any], context: Any) -> None:
        emit("OrderCreated", {"id": event["id"]}, source="shop.orders", event_bus_name="no-bus")

    handler({"id": 1}, FakeLambdaContext())
    answer = publish_handler(store, events_client=events)(
        stream_event(reader.read()), FakeLambdaContext()
    )

    assert answer["batchItemFailures"]
    publication = traces.named("outbox publish OrderCreated")
    (emitting,) = [s for s in traces.ours() if s.name.startswith("idempotency ")]
    assert is_child(publication, emitting)
    assert StatusCode.ERROR == publication.status.status_code
    assert publication.attributes["error.type"] == publication.status.description
    assert "no-bus" == publication.attributes["messaging.destination.name"]
