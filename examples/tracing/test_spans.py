# Testing your spans: one SDK tracer provider for the whole session (OpenTelemetry lets a process
# set it once), and a fresh in-memory exporter's worth of spans for each test.
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from idempotent_lambda import IdempotencyConfig, idempotent

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="session", autouse=True)
def tracer_provider():
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)
    return provider


@pytest.fixture
def spans():
    EXPORTER.clear()
    return EXPORTER


def test_a_retry_is_a_replay_span(spans, idempotency_store, lambda_context):
    @idempotent(
        persistence_store=idempotency_store, config=IdempotencyConfig(event_key_jmespath="order_id")
    )
    def handler(event, context):
        return {"order_id": event["order_id"]}

    handler({"order_id": "o-1"}, lambda_context)
    handler({"order_id": "o-1"}, lambda_context)
    ours = [
        s for s in spans.get_finished_spans() if s.instrumentation_scope.name == "idempotent_lambda"
    ]
    assert [s.attributes["idempotency.outcome"] for s in ours] == ["CLAIMED", "REPLAYED"]
    assert "o-1" not in str([s.attributes for s in ours])  # never the payload
