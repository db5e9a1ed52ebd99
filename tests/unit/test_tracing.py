"""OpenTelemetry: one span per idempotent call, its decision in ``idempotency.*`` attributes.

Run with the real SDK (tests/_otel.py): a tracer provider whose spans land in memory.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest
from opentelemetry.trace import StatusCode

from idempotent_lambda import (
    IdempotencyAlreadyInProgressError,
    IdempotencyConfig,
    IdempotencyPersistenceLayerError,
    IdempotencyValidationError,
    InMemoryPersistenceLayer,
    idempotent,
    idempotent_function,
)
from idempotent_lambda._claim import CLOCK_SKEW_TOLERANCE_MS
from idempotent_lambda._tracing import traced, tracer
from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests._otel import Traces, is_child
from tests.unit._doubles import SpyStore
from tests.unit._modes import Mode
from tests.unit.test_batch_rules import FIFO_ARN, batch, failed, message
from tests.unit.test_lifecycle import EVENT, PREFIX, hold, key_of

#: Values that must never reach a span: in the payload, the result and an error's message.
SECRET_PAYLOAD = "card-4111111111111111"
SECRET_RESULT = "receipt-of-secret-charge"
SECRET_ERROR = "declined-for-secret-reason"


def ours_by_outcome(traces: Traces) -> list[tuple[str, Any]]:
    """Return (outcome, status code) of each of the library's spans, in the order they ended."""
    return [(s.attributes["idempotency.outcome"], s.status.status_code) for s in traces.ours()]


@pytest.mark.no_tracer_provider
def test_no_tracer_provider_means_no_tracer_and_no_span() -> None:
    """Without a provider (the API imported or not) the library makes no span at all."""
    assert tracer() is None

    def flow() -> Any:
        yield None

    call = flow()
    assert traced(call, "f", "powertools") is call  # the call's flow runs as it is


def test_a_claim_and_its_replay_are_spans_under_the_current_one(
    mode: Mode, traces: Traces, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """Each call is a child span of the caller's; the body's own spans are children of it."""

    def body(event: dict[str, Any], context: Any) -> dict[str, Any]:
        with traces.tracer.start_as_current_span("charge"):
            return {"charged": event["amount"]}

    handler = mode.wrap(idempotent(persistence_store=idempotency_store, key_prefix=PREFIX), body)
    with traces.tracer.start_as_current_span("invocation"):
        first = mode.call(handler, EVENT, FakeLambdaContext())
        again = mode.call(handler, EVENT, FakeLambdaContext())

    assert first == again
    invocation = traces.named("invocation")
    claimed, replayed = traces.ours()
    assert [claimed, replayed] == traces.children(invocation)
    assert [traces.named("charge")] == traces.children(claimed)
    function = "test_a_claim_and_its_replay_are_spans_under_the_current_one.<locals>.body"
    assert f"idempotency {PREFIX}" == claimed.name  # the key prefix names the function
    expected = {
        "idempotency.function": function,
        "idempotency.record_format": "powertools",
        "idempotency.key": key_of(EVENT),
        "idempotency.outcome": "CLAIMED",
        "idempotency.store.calls": 2,  # claim, complete
    }
    assert expected.items() <= dict(claimed.attributes or {}).items()
    assert "REPLAYED" == replayed.attributes["idempotency.outcome"]
    assert "store" == replayed.attributes["idempotency.replay.source"]
    assert 1 == replayed.attributes["idempotency.store.calls"]
    assert replayed.attributes["idempotency.store.duration_ms"] >= 0
    assert [StatusCode.UNSET, StatusCode.UNSET] == [s.status.status_code for s in traces.ours()]


def test_no_payload_result_or_error_message_reaches_a_span(
    traces: Traces, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """Claimed, replayed, refused for another payload, failed: no value of theirs is traced."""
    config = IdempotencyConfig(event_key_jmespath="id", payload_validation_jmespath="card")

    @idempotent_function(
        data_keyword_argument="order", persistence_store=idempotency_store, config=config
    )
    def charge(order: dict[str, Any]) -> dict[str, Any]:
        if order.get("fail"):
            raise RuntimeError(SECRET_ERROR)
        return {"receipt": SECRET_RESULT, "card": order["card"]}

    charge(order={"id": 1, "card": SECRET_PAYLOAD})
    charge(order={"id": 1, "card": SECRET_PAYLOAD})
    with pytest.raises(IdempotencyValidationError):
        charge(order={"id": 1, "card": SECRET_PAYLOAD + "9"})
    with pytest.raises(RuntimeError):
        charge(order={"id": 2, "card": SECRET_PAYLOAD, "fail": True})

    assert [
        ("CLAIMED", StatusCode.UNSET),
        ("REPLAYED", StatusCode.UNSET),
        ("VALIDATION_FAILED", StatusCode.ERROR),
        ("RELEASED", StatusCode.ERROR),
    ] == ours_by_outcome(traces)
    values = [str(value) for value in traces.every_value()]
    assert values  # the spans have attributes to search
    for secret in (SECRET_PAYLOAD, SECRET_RESULT, SECRET_ERROR, "4111"):
        assert not [value for value in values if secret in value], secret


def test_errors_set_the_status_with_the_error_type_and_no_message(
    traces: Traces, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """A raised error fails the span: ``error.type`` names its class, the message stays out."""

    @idempotent_function(data_keyword_argument="order", persistence_store=idempotency_store)
    def charge(order: dict[str, Any]) -> None:
        raise ValueError(SECRET_ERROR)

    with pytest.raises(ValueError, match=SECRET_ERROR):
        charge(order={"id": 1})

    (span,) = traces.ours()
    assert StatusCode.ERROR == span.status.status_code
    assert "ValueError" == span.status.description
    assert "ValueError" == span.attributes["error.type"]
    assert "RELEASED" == span.attributes["idempotency.outcome"]
    assert [] == list(span.events)  # no exception event: its message could hold the payload


def test_a_store_outage_and_a_failed_completion_fail_the_span(traces: Traces) -> None:
    """STORE_ERROR raises; COMPLETE_FAILED returns the result: both spans are errors."""
    down = SpyStore(InMemoryPersistenceLayer(), fail={"claim"})
    flaky = SpyStore(InMemoryPersistenceLayer(), fail={"complete"})

    @idempotent_function(data_keyword_argument="order", persistence_store=down, key_prefix="a")
    def first(order: dict[str, Any]) -> int:
        return 1

    @idempotent_function(data_keyword_argument="order", persistence_store=flaky, key_prefix="b")
    def second(order: dict[str, Any]) -> int:
        return 2

    with pytest.raises(IdempotencyPersistenceLayerError):
        first(order={"id": 1})
    assert 2 == second(order={"id": 1})

    outage, unrecorded = traces.ours()
    assert "STORE_ERROR" == outage.attributes["idempotency.outcome"]
    assert "claim" == outage.attributes["idempotency.store.operation"]
    assert "StoreDownError" == outage.attributes["idempotency.error"]
    assert outage.attributes["error.type"].endswith("IdempotencyPersistenceLayerError")
    assert "COMPLETE_FAILED" == unrecorded.attributes["idempotency.outcome"]
    assert "COMPLETE_FAILED" == unrecorded.attributes["error.type"]
    assert [StatusCode.ERROR, StatusCode.ERROR] == [s.status.status_code for s in traces.ours()]


def test_in_progress_waited_taken_over_and_lease_lost(
    traces: Traces, idempotency_clock: ManualClock, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """The other decisions: a live holder refuses, a waiter replays, a passed lease is taken
    over while its old owner, fenced, loses its lease."""
    lease_end = idempotency_clock.now_ms() + 5_000
    hold(idempotency_store, key_of(EVENT), lease_end_ms=lease_end)

    def body(event: dict[str, Any], context: Any) -> str:
        if context.function_name == "slow":  # taken over by a newer call while it runs
            idempotency_clock.advance(ms=5_000 + CLOCK_SKEW_TOLERANCE_MS + 1)
            handler({**event, "n": 2}, FakeLambdaContext(10_000, clock=idempotency_clock))
        return "done"

    handler = idempotent(persistence_store=idempotency_store, key_prefix=PREFIX)(body)
    with pytest.raises(IdempotencyAlreadyInProgressError):
        handler(EVENT, FakeLambdaContext(clock=idempotency_clock))
    idempotency_clock.set(lease_end + CLOCK_SKEW_TOLERANCE_MS + 1)
    handler(EVENT, FakeLambdaContext(clock=idempotency_clock))  # the passed lease: taken over
    slow = {**EVENT, "n": 2}
    handler(slow, FakeLambdaContext(5_000, clock=idempotency_clock, function_name="slow"))

    refused, taken_over, newer, fenced = traces.ours()
    assert ("IN_PROGRESS", StatusCode.ERROR) == ours_by_outcome(traces)[0]
    assert "IdempotencyAlreadyInProgressError" in refused.attributes["error.type"]
    assert "TAKEN_OVER" == taken_over.attributes["idempotency.outcome"]
    assert "TAKEN_OVER" == newer.attributes["idempotency.outcome"]
    assert newer.parent == fenced.context  # the newer call ran inside the slow one's body
    assert ("LEASE_LOST", StatusCode.UNSET) == ours_by_outcome(traces)[3]


class HolderFinishesStore(InMemoryPersistenceLayer):
    """An in-memory store whose key's holder completes it when a waiter first polls it."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[str] = []

    def get(self, idempotency_key: str) -> Any:
        """Complete a held key first (the holder finishing), then read it."""
        while self.pending:
            _complete(self, self.pending.pop())
        return super().get(idempotency_key)


def test_a_waiter_that_replays_records_its_wait(traces: Traces) -> None:
    """A duplicate that waits for the holder, then replays: source ``wait``, the time paused."""
    store = HolderFinishesStore()
    config = IdempotencyConfig(wait_for_in_progress_seconds=30)

    @idempotent_function(
        data_keyword_argument="order", persistence_store=store, config=config, key_prefix="w"
    )
    def charge(order: dict[str, Any]) -> str:
        return "charged"

    key = "w#" + _digest({"id": 1})
    hold(store, key, lease_end_ms=store.clock.now_ms() + 60_000)
    store.pending.append(key)

    assert "charged" == charge(order={"id": 1})

    (span,) = traces.ours()
    assert "REPLAYED" == span.attributes["idempotency.outcome"]
    assert "wait" == span.attributes["idempotency.replay.source"]
    assert span.attributes["idempotency.wait_ms"] > 0


def test_a_batch_has_one_span_per_record_and_only_the_failed_one_is_an_error(
    traces: Traces, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """A FIFO batch (claims ahead, completions behind): three record spans, one failed."""

    @idempotent_sqs_handler(persistence_store=idempotency_store, key_prefix="orders")
    def handler(record: SQSRecord, context: Any) -> str:
        with traces.tracer.start_as_current_span(f"work {record.message_id}"):
            if record.message_id == "m-2":
                raise RuntimeError(SECRET_ERROR)
            return record.message_id

    event = batch(
        message("m-1", {"n": 1}, arn=FIFO_ARN, group="g"),
        message("m-2", {"n": 2, "card": SECRET_PAYLOAD}, arn=FIFO_ARN, group="g"),
        message("m-3", {"n": 3}, arn=FIFO_ARN, group="g"),
    )
    with traces.tracer.start_as_current_span("invocation"):
        response = handler(event, FakeLambdaContext())

    assert ["m-2", "m-3"] == failed(response)  # FIFO: the rest of the group waits
    spans = sorted(traces.ours(), key=lambda s: s.start_time or 0)
    outcomes = {s.attributes["idempotency.key"]: s.attributes["idempotency.outcome"] for s in spans}
    assert ["CLAIMED", "RELEASED", "RELEASED"] == list(outcomes.values())
    assert [StatusCode.UNSET, StatusCode.ERROR, StatusCode.ERROR] == [
        s.status.status_code for s in spans
    ]
    invocation = traces.named("invocation")
    assert all(s.parent == invocation.context for s in spans)
    work = traces.named("work m-1")
    assert work.parent == spans[0].context  # the body runs inside its record's span
    assert not [v for v in traces.every_value(spans) if SECRET_ERROR in str(v)]


class TracedClientStore(InMemoryPersistenceLayer):
    """An in-memory store whose calls make spans, as botocore's instrumentation does."""

    def __init__(self, traces: Traces) -> None:
        super().__init__()
        self.tracer = traces.tracer

    def claim(self, record: Any, *, now_ms: int, lease_cutoff_ms: int) -> Any:
        """Claim inside a client span."""
        with self.tracer.start_as_current_span(f"client claim {record.idempotency_key}"):
            return super().claim(record, now_ms=now_ms, lease_cutoff_ms=lease_cutoff_ms)

    def complete(self, record: Any) -> bool:
        """Complete inside a client span."""
        with self.tracer.start_as_current_span(f"client complete {record.idempotency_key}"):
            return super().complete(record)


@pytest.mark.parametrize("fifo", [True, False], ids=["fifo chain", "standard queue"])
def test_store_calls_taken_ahead_or_written_behind_are_children_of_their_records_span(
    traces: Traces, fifo: bool
) -> None:
    """A FIFO chain claims ahead and completes behind on worker threads, a standard queue's
    records claim in their lanes and complete behind: each client span still belongs to its
    own record's span."""
    store = TracedClientStore(traces)

    @idempotent_sqs_handler(persistence_store=store, key_prefix="orders")
    def handler(record: SQSRecord, context: Any) -> str:
        return record.message_id

    fifo_options: dict[str, Any] = {"arn": FIFO_ARN, "group": "g"} if fifo else {}
    event = batch(*(message(f"m-{n}", {"n": n}, **fifo_options) for n in range(4)))
    assert [] == failed(handler(event, FakeLambdaContext()))

    records = traces.ours()
    assert 4 == len(records)
    for record in records:
        key = record.attributes["idempotency.key"]
        names = sorted(child.name for child in traces.children(record))
        assert [f"client claim {key}", f"client complete {key}"] == names


def test_an_eventbridge_event_from_the_outbox_continues_its_trace(
    traces: Traces, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """``detail.outbox.traceparent`` makes the call's span a child of the publication's, linked
    to the invocation; a malformed one is ignored (the span stays under the invocation)."""
    from idempotent_lambda.event_keys import OUTBOX_EVENT

    config = IdempotencyConfig(event_key_jmespath=OUTBOX_EVENT)
    handler = idempotent(persistence_store=idempotency_store, config=config)(lambda e, c: "ok")
    with traces.tracer.start_as_current_span("publication") as publication:
        ctx = publication.get_span_context()
        traceparent = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-01"
    outbox = {"id": "e-1", "traceparent": traceparent}
    with traces.tracer.start_as_current_span("invocation"):
        handler({"detail": {"outbox": outbox, "n": 1}}, FakeLambdaContext())
        bad = {"id": "e-2", "traceparent": "00-not-a-trace"}
        handler({"detail": {"outbox": bad, "n": 2}}, FakeLambdaContext())

    continued, ignored = traces.ours()
    invocation = traces.named("invocation")
    assert is_child(continued, traces.named("publication"))
    assert [invocation.context] == [link.context for link in continued.links]
    assert "e-1" == continued.attributes["messaging.message.id"]
    assert is_child(ignored, invocation)
    assert [] == list(ignored.links)


def test_a_request_the_http_adapter_does_not_cover_has_no_span(
    traces: Traces, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """A GET to an ``idempotent_http`` handler runs as if undecorated: no span; a POST has one."""
    from idempotent_lambda.adapters.api_gateway import idempotent_http
    from idempotent_lambda.testing import api_gateway_http_event

    @idempotent_http(persistence_store=idempotency_store, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": 200, "body": "{}"}

    post = api_gateway_http_event()
    get = {
        **post,
        "requestContext": {
            **post["requestContext"],
            "http": {**post["requestContext"]["http"], "method": "GET"},
        },
    }
    handler(get, FakeLambdaContext())
    handler(post, FakeLambdaContext())

    assert ["CLAIMED"] == [s.attributes["idempotency.outcome"] for s in traces.ours()]


def test_span_names_say_which_function_and_adapter_they_belong_to(
    traces: Traces, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """A span is named after the key prefix, else the handler's module and name (Lambda
    handlers are mostly called ``handler``), after the adapter that calls it."""
    from idempotent_lambda.adapters.api_gateway import idempotent_http
    from idempotent_lambda.testing import api_gateway_http_event, sqs_event

    @idempotent(persistence_store=idempotency_store)
    def handler(event: dict[str, Any], context: Any) -> int:
        return 1

    @idempotent_http(persistence_store=idempotency_store, key_prefix="orders.create")
    def create(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": 201, "body": "{}"}

    @idempotent_sqs_handler(persistence_store=idempotency_store, key_prefix="orders.ship")
    def ship(record: SQSRecord, context: Any) -> str:
        return record.message_id

    handler({"n": 1}, FakeLambdaContext())
    create(api_gateway_http_event(), FakeLambdaContext())
    ship(sqs_event(), FakeLambdaContext())

    local = "test_span_names_say_which_function_and_adapter_they_belong_to.<locals>.handler"
    assert [
        f"idempotency {__name__}.{local}",
        "idempotency http orders.create",
        "idempotency sqs orders.ship",
    ] == [s.name for s in traces.ours()]


def test_a_sampled_out_call_records_no_span_and_its_children_follow_the_sampler(
    traces: Traces, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """Under a sampler that leaves the trace out, nothing is exported, the body's spans share
    the unsampled context, and the call still works."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased

    traces.sampler = ParentBased(ALWAYS_OFF)
    seen: list[Any] = []

    def body(event: dict[str, Any], context: Any) -> str:
        seen.append(trace.get_current_span().get_span_context())
        return "done"

    handler = idempotent(persistence_store=idempotency_store, key_prefix=PREFIX)(body)
    assert "done" == handler(EVENT, FakeLambdaContext())
    assert "done" == handler(EVENT, FakeLambdaContext())

    assert [] == traces.spans()
    assert 1 == len(seen)
    assert seen[0].is_valid
    assert not seen[0].trace_flags.sampled


def test_tracing_imports_nothing_when_the_application_does_not() -> None:
    """Without OpenTelemetry imported by the application, a call never imports it."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["opentelemetry"] = None  # as if not installed: importing it fails
        from idempotent_lambda import InMemoryPersistenceLayer, idempotent_function

        store = InMemoryPersistenceLayer()
        @idempotent_function(data_keyword_argument="o", persistence_store=store)
        def f(o):
            return o
        assert {"a": 1} == f(o={"a": 1}) == f(o={"a": 1})
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert 0 == done.returncode, done.stderr
    assert "['opentelemetry']" == done.stdout.strip()  # only the blocked entry itself


def _digest(material: Any) -> str:
    from idempotent_lambda._identity import digest

    return digest(IdempotencyConfig(), material)


def _complete(store: InMemoryPersistenceLayer, key: str) -> None:
    """Complete the record ``key`` held by "someone-else" with a stored result."""
    from idempotent_lambda.record import IdempotencyRecord, Status

    now = store.clock.now_ms()
    record = IdempotencyRecord(
        idempotency_key=key,
        status=Status.COMPLETED,
        expiry_timestamp=now // 1000 + 3600,
        response_data='"charged"',
        owner="someone-else",
    )
    assert store.complete(record)
