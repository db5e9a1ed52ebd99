"""The demo's tracing step: the OpenTelemetry traces of a request, its retry and its event.

The step sets an SDK tracer provider whose spans stay in memory, instruments botocore (so each
AWS request is a span, as the ADOT layer makes them), and sends ``POST /orders`` twice with one
``Idempotency-Key``, then runs PublishEvents on the event the request emitted and ReserveStock
on the message the bus's rule delivered; each invocation under a server span that stands for the
Lambda instrumentation's. It prints the traces as trees: the library's ``idempotency ...`` spans
with their decisions, the AWS requests made inside them, and the request's trace going on
through the publication to ReserveStock's record. See docs/tracing.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

    from samples.local_app import LocalApp
    from samples.watchers import Transcript

#: The attributes printed after a span's name (the rest are in the exporter's output).
SHOWN = ("faas.trigger", "rpc.method", "error.type")
#: The library's attributes, each group on a line of its own under its span.
SHOWN_BELOW = (
    ("idempotency.outcome", "idempotency.replay.source"),
    ("idempotency.key",),
    ("idempotency.store.calls", "idempotency.store.duration_ms"),
)


def step_trace(app: LocalApp, t: Transcript) -> None:
    """Trace ``POST /orders`` and its retry; print both trees and check them."""
    t.step("6. Tracing: the OpenTelemetry traces of a request, its retry and the event it emitted")
    try:
        from opentelemetry import trace
        from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        t.note("opentelemetry-sdk is not installed (make demo installs it): step skipped")
        return
    from samples.local_app import order_body

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
        followed = _follow_the_event(app, tracer)
    finally:
        instrumentor.uninstrument()
        # The SDK cannot take a processor off a provider: a stopped exporter keeps no more spans
        # when the provider outlives the step (one set before it, as by the test process).
        finished = list(exporter.get_finished_spans())
        exporter.shutdown()
    t.note(f"POST /orders, then its retry -> {answers[0].status}, {answers[1].status}{followed}")
    # The functions' traces only: the emulator's own requests (reading the stream and the
    # queue, as the event source mappings do) are traces of their own, left out.
    invocations = {s.context.trace_id for s in finished if s.kind is trace.SpanKind.SERVER}
    spans = [s for s in finished if s.context.trace_id in invocations]
    for line in render(spans):
        t.note(line)
    requests = [s.context for s in spans if s.name.startswith("POST /orders")]
    ours = [s for s in spans if s.name.startswith("idempotency ") and s.parent in requests]
    outcomes = [dict(s.attributes or {}).get("idempotency.outcome") for s in ours]
    t.expect(
        "the request's span says CLAIMED, the retry's REPLAYED",
        outcomes == ["CLAIMED", "REPLAYED"],
    )
    t.expect(
        "the DynamoDB requests are children of the idempotency spans",
        all(any(c.parent == s.context for c in spans) for s in ours[:2]),
    )
    if app.outbox is not None:
        request = next(s for s in spans if s.name == "POST /orders (request)")
        chain = [s for s in spans if s.context.trace_id == request.context.trace_id]
        keys = [str(dict(s.attributes or {}).get("idempotency.key", "")) for s in chain]
        t.expect(
            "one trace from the request through the publication to ReserveStock's work",
            "outbox publish OrderCreated" in [s.name for s in chain]
            and any(key.startswith("orders.reserve_stock#") for key in keys),
        )
    t.expect(
        "no span attribute holds the order's contents",
        not any("SKU-TRACE" in str(v) for s in spans for v in dict(s.attributes or {}).values()),
    )


def _follow_the_event(app: LocalApp, tracer: Any) -> str:
    """Publish the request's OrderCreated and consume it, each in an invocation span of its own.

    Returns what to add to the transcript's line: the publisher's and the consumer's answers.
    """
    from opentelemetry.trace import SpanKind

    from samples.local_lambda import sqs_event, stream_event
    from samples.outbox_steps import CONSUME, PUBLISH

    outbox = app.outbox
    if outbox is None:
        return " (no EventBridge and SQS endpoint: the event is not followed)"
    _, delivered = outbox.read()
    with tracer.start_as_current_span(
        "PublishEvents (invocation)",
        kind=SpanKind.SERVER,
        attributes={"faas.trigger": "datasource"},
    ):
        published = app.call(PUBLISH, stream_event(delivered))
    messages = outbox.queue.receive()
    with tracer.start_as_current_span(
        "ReserveStock (invocation)", kind=SpanKind.SERVER, attributes={"faas.trigger": "pubsub"}
    ):
        consumed = app.call(CONSUME, sqs_event(messages))
    outbox.queue.settle(messages, consumed)
    failures = len(published["batchItemFailures"]) + len(consumed["batchItemFailures"])
    return (
        f"; PublishEvents published {len(delivered)} event(s), ReserveStock consumed "
        f"{len(messages)} message(s), {failures} failure(s)"
    )


def render(spans: Sequence[ReadableSpan]) -> list[str]:
    """Return ``spans`` as indented trees, children in start order: a line per span, then its
    ``idempotency.*`` attributes and links on lines of their own, so lines fit a terminal."""
    by_parent: dict[Any, list[ReadableSpan]] = {}
    ids = {s.context.span_id for s in spans}
    names = {s.context.span_id: s.name for s in spans}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        parent = span.parent.span_id if span.parent and span.parent.span_id in ids else None
        by_parent.setdefault(parent, []).append(span)
    lines: list[str] = []

    def walk(span: ReadableSpan, prefix: str, last: bool, top: bool) -> None:
        attributes = dict(span.attributes or {})

        def shown(names: Sequence[str]) -> str:
            return "  ".join(f"{n}={_short(attributes[n])}" for n in names if n in attributes)

        took = ((span.end_time or 0) - (span.start_time or 0)) / 1e6
        branch = "" if top else ("└─ " if last else "├─ ")
        status = " ERROR" if span.status.status_code.name == "ERROR" else ""
        kind = f" [{span.kind.name}]" if span.kind.name in ("PRODUCER", "CONSUMER") else ""
        lines.append(
            f"{prefix}{branch}{span.name}{kind} {took:.1f} ms{status}  {shown(SHOWN)}".rstrip()
        )
        children = by_parent.get(span.context.span_id, [])
        inner = prefix if top else prefix + ("   " if last else "│  ")
        below = [shown(group) for group in SHOWN_BELOW]
        linked = [names[link.context.span_id] for link in span.links if link.context.span_id in ids]
        if linked:
            below.append(f"(linked to {', '.join(linked)})")
        for text in filter(None, below):
            lines.append(f"{inner}{'│' if children else ' '}   {text}".rstrip())
        for n, child in enumerate(children):
            walk(child, inner, n == len(children) - 1, False)

    for root in by_parent.get(None, []):
        walk(root, "", True, True)
    return lines


def _short(value: object) -> object:
    """Shorten a key's digest for the screen: ``prefix#1a00…32fe``."""
    if isinstance(value, str) and "#" in value:
        prefix, _, digest = value.rpartition("#")
        if len(digest) > 12:
            return f"{prefix}#{digest[:4]}…{digest[-4:]}"
    return value
