# Without the ADOT layer: the OpenTelemetry SDK, set up once per execution environment, sends
# spans over OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT (a collector, or a vendor's endpoint).
import os

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent

service = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "orders")
provider = TracerProvider(resource=Resource.create({"service.name": service}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(provider)  # the library's spans use it from now on
tracer = trace.get_tracer("orders")

store = DynamoDBPersistenceLayer("IdempotencyTable")


@idempotent(persistence_store=store, config=IdempotencyConfig(event_key_jmespath="order_id"))
def create_order(event, context):
    return {"order_id": event["order_id"], "status": "ACCEPTED"}


def handler(event, context):
    attributes = {"faas.trigger": "http", "faas.invocation_id": context.aws_request_id}
    with tracer.start_as_current_span(
        "POST /orders", kind=trace.SpanKind.SERVER, attributes=attributes
    ):
        try:
            return create_order(event, context)
        finally:
            provider.force_flush()  # before Lambda freezes the environment
