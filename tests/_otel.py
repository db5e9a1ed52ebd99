"""The real OpenTelemetry SDK for tests: a tracer provider whose spans land in memory.

`Traces` installs an SDK ``TracerProvider`` with an ``InMemorySpanExporter`` as the global one
for one test (the ``traces`` fixture of tests/conftest.py) and reads the finished spans back.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)


class Traces:
    """Finished spans of the test's global tracer provider."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("tests")

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


def install(monkeypatch: pytest.MonkeyPatch) -> Traces:
    """Make a fresh `Traces` provider the global one until the test ends.

    The API lets a process set its provider only once; the test sets the module's global
    instead, and monkeypatch restores it (no provider) afterwards.
    """
    traces = Traces()
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", traces.provider)
    return traces
