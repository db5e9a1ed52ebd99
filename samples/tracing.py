"""The demo's tracing step: the OpenTelemetry trace of one request and of its retry.

The step sets an SDK tracer provider whose spans stay in memory, instruments botocore (so each
DynamoDB request is a span, as the ADOT layer makes them), and sends ``POST /orders`` twice with
one ``Idempotency-Key`` under a server span that stands for the Lambda instrumentation's. Then it
prints each trace as a tree: the library's ``idempotency ...`` span with its decision, and the
DynamoDB requests made inside it. See docs/tracing.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

    from samples.scenario import LocalApp, Transcript

#: The attributes printed after a span's name (the rest are in the exporter's output).
SHOWN = (
    "faas.trigger",
    "idempotency.outcome",
    "idempotency.key",
    "idempotency.replay.source",
    "idempotency.store.calls",
    "idempotency.store.duration_ms",
    "idempotency.record_format",
    "rpc.method",
    "error.type",
)


def step_trace(app: LocalApp, t: Transcript) -> None:
    """Trace ``POST /orders`` and its retry; print both trees and check them."""
    t.step("5. Tracing: the OpenTelemetry trace of one request and of its retry")
    try:
        from opentelemetry import trace
        from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        t.note("opentelemetry-sdk is not installed (make demo installs it): step skipped")
        return
    from samples.scenario import order_body

    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # else one set before (auto-instrumentation)
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = BotocoreInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    tracer = provider.get_tracer("samples.demo")
    body = order_body(f"tracy-{app.run_id}", ("SKU-TRACE", 1, "9.99"))
    answers = []
    try:
        for attempt in ("request", "retry"):
            with tracer.start_as_current_span(
                f"POST /orders ({attempt})",
                kind=trace.SpanKind.SERVER,
                attributes={"faas.trigger": "http", "http.request.method": "POST"},
            ):
                answers.append(app.post_order(body, f"trace-{app.run_id}"))
    finally:
        instrumentor.uninstrument()
    t.note(f"POST /orders, then its retry -> {answers[0].status}, {answers[1].status}")
    spans = list(exporter.get_finished_spans())
    for line in render(spans):
        t.note(line)
    ours = [s for s in spans if s.name.startswith("idempotency ")]
    outcomes = [dict(s.attributes or {}).get("idempotency.outcome") for s in ours]
    t.expect(
        "the request's span says CLAIMED, the retry's REPLAYED",
        outcomes == ["CLAIMED", "REPLAYED"],
    )
    t.expect(
        "the DynamoDB requests are children of the idempotency spans",
        all(any(c.parent == s.context for c in spans) for s in ours),
    )
    t.expect(
        "no span attribute holds the order's contents",
        not any("SKU-TRACE" in str(v) for s in spans for v in dict(s.attributes or {}).values()),
    )


def render(spans: Sequence[ReadableSpan], shown: Sequence[str] = SHOWN) -> list[str]:
    """Return ``spans`` as indented trees, one line per span, children in start order."""
    by_parent: dict[Any, list[ReadableSpan]] = {}
    ids = {s.context.span_id for s in spans}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        parent = span.parent.span_id if span.parent and span.parent.span_id in ids else None
        by_parent.setdefault(parent, []).append(span)
    lines: list[str] = []

    def walk(span: ReadableSpan, prefix: str, last: bool, top: bool) -> None:
        attributes = dict(span.attributes or {})
        details = " ".join(f"{name}={attributes[name]}" for name in shown if name in attributes)
        took = ((span.end_time or 0) - (span.start_time or 0)) / 1e6
        branch = "" if top else ("└─ " if last else "├─ ")
        status = " ERROR" if span.status.status_code.name == "ERROR" else ""
        lines.append(f"{prefix}{branch}{span.name} {took:.1f} ms{status}  {details}".rstrip())
        children = by_parent.get(span.context.span_id, [])
        inner = prefix if top else prefix + ("   " if last else "│  ")
        for n, child in enumerate(children):
            walk(child, inner, n == len(children) - 1, False)

    for root in by_parent.get(None, []):
        walk(root, "", True, True)
    return lines
