"""The real OpenTelemetry SDK for tests: one tracer provider per test process, spans in memory.

OpenTelemetry's API lets a process set its global tracer provider once, so the test process
sets one SDK ``TracerProvider`` for the whole session (`install_once`, called by the
``session_tracer_provider`` fixture of tests/conftest.py) and never replaces it. What changes
from test to test goes through two switches of the tests' own, both plain SDK extension points:
`Forward`, the provider's span processor, hands each finished span to the current test's
``InMemorySpanExporter`` (none outside a ``traces`` test: the span is dropped), and `Switchable`,
the provider's sampler, samples as the current test asks (``ParentBased(ALWAYS_ON)``, the SDK's
default, unless a test sets another).

Every test of the process therefore runs with a provider set, as under the ADOT layer. A test
about the library *without* a provider runs in a fresh interpreter (`run_without_a_provider`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_ON,
    ParentBased,
    Sampler,
    SamplingResult,
)
from opentelemetry.trace import Link, SpanKind, TraceState
from opentelemetry.util.types import Attributes

#: Set in a child test process that must start without a tracer provider.
NO_PROVIDER = "IDEMPOTENT_LAMBDA_TESTS_WITHOUT_A_PROVIDER"
ROOT = Path(__file__).resolve().parents[1]


class Forward(SpanProcessor):
    """Hand each finished span to the current test's exporter, if a test has one."""

    def __init__(self) -> None:
        self.exporter: SpanExporter | None = None

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing to do when a span starts."""

    def on_end(self, span: ReadableSpan) -> None:
        """Export ``span`` to the current exporter (the SDK ends only recording spans here)."""
        exporter = self.exporter
        if exporter is not None:
            exporter.export((span,))


class Switchable(Sampler):
    """Sample as `current` does: the SDK's default sampler unless a test sets another."""

    def __init__(self) -> None:
        self.current: Sampler = DEFAULT_SAMPLER

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        """Ask the current sampler."""
        return self.current.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        """Describe the current sampler."""
        return f"Switchable{{{self.current.get_description()}}}"


DEFAULT_SAMPLER: Sampler = ParentBased(ALWAYS_ON)
FORWARD = Forward()
SAMPLER = Switchable()
PROVIDER = TracerProvider(sampler=SAMPLER)
PROVIDER.add_span_processor(FORWARD)


def install_once() -> TracerProvider:
    """Make `PROVIDER` the process's global tracer provider (the first call sets it).

    Raises AssertionError when something else set the global provider first: the tests would
    not see their spans.
    """
    if trace.get_tracer_provider() is not PROVIDER:
        trace.set_tracer_provider(PROVIDER)
    assert trace.get_tracer_provider() is PROVIDER, "another tracer provider was set first"
    return PROVIDER


class Traces:
    """Finished spans of one test, taken from the process's tracer provider."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer = PROVIDER.get_tracer("tests")

    @property
    def sampler(self) -> Sampler:
        """The sampler of this test's spans (``ParentBased(ALWAYS_ON)`` unless set)."""
        return SAMPLER.current

    @sampler.setter
    def sampler(self, sampler: Sampler) -> None:
        SAMPLER.current = sampler

    def spans(self) -> list[ReadableSpan]:
        """Return every finished span, in the order they ended."""
        return list(self.exporter.get_finished_spans())

    def ours(self) -> list[ReadableSpan]:
        """Return the library's spans (``idempotency ...``), in the order they ended."""
        return [s for s in self.spans() if s.instrumentation_scope.name == "idempotent_lambda"]

    def named(self, name: str) -> ReadableSpan:
        """Return the one finished span called ``name``."""
        found = [s for s in self.spans() if s.name == name]
        assert 1 == len(found), [s.name for s in self.spans()]
        return found[0]

    def children(self, span: ReadableSpan) -> list[ReadableSpan]:
        """Return the spans whose parent is ``span``."""
        return [s for s in self.spans() if is_child(s, span)]

    def every_value(self, spans: list[ReadableSpan] | None = None) -> Iterator[Any]:
        """Yield every attribute value of ``spans`` (all), their events and links, each name and
        status description (lists flattened)."""
        for span in self.spans() if spans is None else spans:
            holders = [span.attributes, *(e.attributes for e in span.events)]
            holders += [link.attributes for link in span.links]
            for attributes in holders:
                for value in (attributes or {}).values():
                    yield from value if isinstance(value, tuple | list) else (value,)
            yield span.name
            yield span.status.description


def is_child(span: ReadableSpan, parent: ReadableSpan) -> bool:
    """Tell whether ``parent`` is ``span``'s parent, in this process or across a carrier."""
    found, expected = span.parent, parent.context
    return (
        found is not None
        and expected is not None
        and (found.trace_id, found.span_id) == (expected.trace_id, expected.span_id)
    )


def collecting() -> Iterator[Traces]:
    """Yield a `Traces` that receives the spans finished until the test ends, then detach it
    and put the default sampler back (the ``traces`` fixture)."""
    install_once()
    traces = Traces()
    FORWARD.exporter = traces.exporter
    try:
        yield traces
    finally:
        FORWARD.exporter = None
        SAMPLER.current = DEFAULT_SAMPLER


def run_without_a_provider(code: str) -> str:
    """Run ``code`` in a fresh interpreter, where no tracer provider is set; return its stdout.

    Fails the test with the child's stderr when the child fails.
    """
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, NO_PROVIDER: "1"},
    )
    assert 0 == done.returncode, done.stdout + done.stderr
    return done.stdout
