"""OpenTelemetry spans: one span per idempotent call, holding the decision taken for it.

Every decorated call, batch record and durable step goes through `traced`, which wraps its flow
in a span named ``idempotency <function>`` when OpenTelemetry is in use; each decision the call
reports (`idempotent_lambda._observability.Reporter.send`) sets the span's ``idempotency.*``
attributes. The span is the current one while the call runs, so the store's DynamoDB spans
(botocore's instrumentation) and the body's own spans are its children.

"In use" means a tracer provider is set: this module never imports OpenTelemetry. It reads
``opentelemetry.trace`` only once someone else (the ADOT layer, the user's setup) has imported
it, so without the package, or with the API but no provider, a call costs one dictionary
lookup and nothing is imported at cold start.

Attributes never hold a payload, a result or an exception's message: only the hashed key,
outcomes, counts, durations, names of classes and of settings.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from idempotent_lambda._durable_context import is_suspension
from idempotent_lambda._effects import Flow, Pause
from idempotent_lambda._observability import (
    Decision,
    decision_level,
    span_of_context,
)

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, Span, Tracer

__all__ = [
    "current_traceparent",
    "event_parent",
    "links_to_current",
    "outcome_attributes",
    "traced",
    "tracer",
]

_API = "opentelemetry.trace"
#: Our attributes (the OpenTelemetry ones are spelled out where used: ``error.type``).
OUTCOME = "idempotency.outcome"
KEY = "idempotency.key"
FUNCTION = "idempotency.function"
RECORD_FORMAT = "idempotency.record_format"
STORE_CALLS = "idempotency.store.calls"
STORE_REQUESTS = "idempotency.store.requests"
STORE_DURATION_MS = "idempotency.store.duration_ms"
STORE_OPERATION = "idempotency.store.operation"
ERROR = "idempotency.error"
REPLAY_SOURCE = "idempotency.replay.source"
WAIT_MS = "idempotency.wait_ms"
KEY_SOURCE = "idempotency.key_source"
EXECUTION = "idempotency.durable_execution_arn"

#: ERROR-level decisions: the call may have returned, but its record is not what it should be.
_ERROR_LEVEL = 40
_cached: tuple[object, Tracer] | None = None
#: ``opentelemetry.trace``'s provider getter and its two stand-ins for "no provider", read once
#: the application has imported it.
_api: tuple[Callable[[], Any], tuple[type, ...]] | None = None


def tracer() -> Tracer | None:
    """Return the library's tracer, or None when no tracer provider is set (or no OpenTelemetry).

    The provider is read on every call (a test or a late setup may set it any time); its
    tracer is kept until the provider changes.
    """
    global _api, _cached  # noqa: PLW0603 - found once; one tracer per provider, swapped whole
    api = _api
    if api is None:
        trace = sys.modules.get(_API)
        if trace is None:
            return None
        api = _api = (
            trace.get_tracer_provider,
            (trace.ProxyTracerProvider, trace.NoOpTracerProvider),
        )
    provider = api[0]()
    if isinstance(provider, api[1]):
        return None
    cached = _cached
    if cached is not None and cached[0] is provider:
        return cached[1]
    found: Tracer = provider.get_tracer("idempotent_lambda")
    _cached = (provider, found)
    return found


def traced(
    flow: Flow, function: str, record_format: str, *, name: str | None = None, carrier: Any = None
) -> Flow:
    """Return ``flow`` run inside a span of its own, or ``flow`` itself when nothing traces.

    Args:
        flow: One call's flow (`idempotent_lambda._engine.IdempotentFunction.enter`).
        function: The decorated function's name, in the span's attributes.
        record_format: The config's ``record_format``.
        name: What the span is named after (``idempotency <name>``); ``function`` when None.
        carrier: The call's payload: when it is an outbox event that carries a trace context
            (`event_parent`), the span continues that trace and links to the current span.
    """
    found = tracer()
    if found is None:
        return flow
    attributes = {FUNCTION: function, RECORD_FORMAT: record_format}
    return _spanned(flow, found, name or function, attributes, carrier)


def _spanned(
    flow: Flow, tracer: Tracer, name: str, attributes: dict[str, str], carrier: Any
) -> Flow:
    """Carry ``flow``'s effects through, inside a span that is current while it runs."""
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    parent = event_parent(carrier, attributes) if carrier is not None else None
    span = tracer.start_span(
        f"idempotency {name}",
        context=parent,
        kind=trace.SpanKind.INTERNAL if parent is None else trace.SpanKind.CONSUMER,
        links=None if parent is None else links_to_current(),
        attributes=attributes,
    )
    recorder = _Recorder(span)
    otel_token = otel_context.attach(trace.set_span_in_context(span, parent))
    # A span left out by the sampler records nothing: its decisions are not even built.
    token = span_of_context.set(recorder.decide if span.is_recording() else None)
    sent: Any = None
    error: BaseException | None = None
    try:
        while True:
            try:
                effect = flow.send(sent) if error is None else flow.throw(error)
            except StopIteration as stop:
                recorder.finish(None)
                return stop.value
            finally:
                sent = error = None
            if isinstance(effect, Pause):
                recorder.paused_s += effect.seconds
            try:
                sent = yield effect
            except GeneratorExit:
                flow.close()
                raise
            except BaseException as exc:
                error = exc
    except BaseException as exc:
        recorder.finish(exc)
        raise
    finally:
        with suppress(ValueError):  # closed from another context (a generator collected late)
            span_of_context.reset(token)
        otel_context.detach(otel_token)
        span.end()


class _Recorder:
    """What one span has seen: the last decision's level and the time paused waiting."""

    __slots__ = ("level", "outcome", "paused_s", "span")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.paused_s = 0.0
        self.level = 0
        self.outcome = ""

    def decide(self, decision: Decision) -> None:
        """Note ``decision`` on the span; a later decision of the call overrides an earlier."""
        self.level = decision_level(decision.outcome)
        self.outcome = decision.outcome.value
        if self.span.is_recording():
            self.span.set_attributes(outcome_attributes(decision))

    def finish(self, error: BaseException | None) -> None:
        """Set the span's status: an error raised, or an ERROR-level decision, fails it."""
        span = self.span
        if not span.is_recording():
            return
        from opentelemetry.trace import Status, StatusCode

        if self.paused_s:
            span.set_attribute(WAIT_MS, round(self.paused_s * 1000, 3))
        if error is not None and not isinstance(error, GeneratorExit) and not is_suspension(error):
            kind = type(error)
            name = kind.__qualname__
            module = kind.__module__
            span.set_attribute("error.type", name if module == "builtins" else f"{module}.{name}")
            span.set_status(Status(StatusCode.ERROR, name))  # never the message: it may hold data
        elif error is None and self.level >= _ERROR_LEVEL:
            span.set_attribute("error.type", self.outcome)
            span.set_status(Status(StatusCode.ERROR, self.outcome))


def outcome_attributes(decision: Decision) -> Mapping[str, str | int | float]:
    """Return the span attributes of ``decision``: hashed key, outcome, store calls and time."""
    attributes: dict[str, str | int | float] = {
        OUTCOME: decision.outcome.value,
        STORE_CALLS: decision.store_calls,
        STORE_REQUESTS: decision.store_requests,
        STORE_DURATION_MS: round(decision.store_ms, 3),
    }
    for name, value in (
        (KEY, decision.key),
        (REPLAY_SOURCE, decision.source),
        (STORE_OPERATION, decision.operation),
        (ERROR, decision.error),
        (KEY_SOURCE, decision.key_source),
        (EXECUTION, decision.execution),
    ):
        if value is not None:
            attributes[name] = value
    return attributes


# --- The outbox: one trace from the emitting call to the consumer's ---


def current_traceparent() -> str | None:
    """Return the W3C ``traceparent`` of the current span; None when nothing traces.

    `idempotent_lambda.outbox.emit` stores it with the event.
    """
    if tracer() is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


def event_parent(payload: Any, attributes: dict[str, str] | None = None) -> Context | None:
    """Return the trace context an outbox event carries; None when ``payload`` carries none.

    ``payload`` is the event (an EventBridge rule invoking the function), or its JSON text
    where a batch source says a record carries it that way (an SQS message's body, for a rule
    targeting a queue: `idempotent_lambda.adapters._batch_source.BatchSource.carrier`). The
    publisher puts the context at ``detail.outbox.traceparent``, beside the event id.
    ``attributes`` gets the event's id as ``messaging.message.id``.
    """
    if isinstance(payload, str) and '"traceparent"' in payload:
        try:
            payload = json.loads(payload)
        except ValueError:
            return None
    if not isinstance(payload, dict):  # events arrive as JSON objects
        return None
    detail = payload.get("detail")
    if not isinstance(detail, dict):
        return None
    from idempotent_lambda._outbox_format import DETAIL_KEY

    outbox = detail.get(DETAIL_KEY)
    if not isinstance(outbox, dict) or not isinstance(outbox.get("traceparent"), str):
        return None
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    context = TraceContextTextMapPropagator().extract({"traceparent": outbox["traceparent"]})
    if not trace.get_current_span(context).get_span_context().is_valid:
        return None
    if attributes is not None:
        attributes["messaging.operation.type"] = "process"
        if isinstance(outbox.get("id"), str):
            attributes["messaging.message.id"] = outbox["id"]
    return context


def links_to_current() -> list[Link]:
    """Return a link to the current span (the invocation's), when there is a valid one."""
    from opentelemetry import trace

    current = trace.get_current_span().get_span_context()
    return [trace.Link(current)] if current.is_valid else []
