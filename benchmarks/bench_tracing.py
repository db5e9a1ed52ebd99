"""CPU per invocation with tracing off and on: what the OpenTelemetry spans cost.

One decorated function (``idempotent_function`` on the in-memory store, a ~1 KB payload, a body
that does nothing) is called in fresh interpreters, one per variant and round, the variants
taking turns in every round so that load from other processes hits them alike:

- ``off: not imported``: OpenTelemetry is not imported (as when it is not installed);
- ``off: API, no provider``: ``opentelemetry.trace`` imported, no tracer provider set;
- ``on: SDK, no-op exporter``: the SDK's ``TracerProvider`` with a ``BatchSpanProcessor`` (what
  the ADOT layer and most setups use) exporting to an exporter that drops the spans;
- ``on: SDK, sampled out``: the same provider with the ``ALWAYS_OFF`` sampler (a trace the
  sampler left out, as most are at a low sampling rate).

Per variant and path (``first``: a new key each call, claim + body + complete; ``replay``: the
same key, a stored result), the process's CPU time (every thread: the batch processor's too,
flushed inside each timed slice) per call, after a warm-up: ``--calls`` calls in 5 slices, the
fastest slice kept, since load from other processes only ever adds time. The median over
``--rounds`` rounds is reported, with its difference from ``off: not imported``.
With ``--before DIR`` (a directory holding an ``idempotent_lambda`` package from before tracing,
as for ``bench_pipeline``), that package runs as one more variant, OpenTelemetry not imported.

Run: ``python -m benchmarks.bench_tracing [--before /tmp/il-before-lib]`` (needs
opentelemetry-sdk: the dev group has it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

VARIANTS = (
    "off: not imported",
    "off: API, no provider",
    "on: SDK, no-op exporter",
    "on: SDK, sampled out",
)
BEFORE = "before: no tracing code"
PATHS = ("first", "replay")
#: Timed slices per measurement; the fastest is kept (load from other processes only slows).
CHUNKS = 5
ROOT = Path(__file__).resolve().parent.parent
BEFORE_VARIABLE = "BENCH_TRACING_BEFORE"
PAYLOAD = {"order_id": 0, "items": [{"sku": f"sku-{n}", "qty": n} for n in range(30)]}


def setup(variant: str) -> Any:
    """Set OpenTelemetry up as ``variant`` says; return the provider to flush, if any."""
    if variant == "off: not imported":
        sys.modules["opentelemetry"] = None  # type: ignore[assignment]  # importing it fails
        return None
    from opentelemetry import trace

    if variant == "off: API, no provider":
        return None
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased

    class DropExporter(SpanExporter):
        """Exports nothing: the cost measured is making the spans, not sending them."""

        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    sampled_out = variant == "on: SDK, sampled out"
    provider = TracerProvider(sampler=ParentBased(ALWAYS_OFF)) if sampled_out else TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DropExporter()))
    trace.set_tracer_provider(provider)
    return provider


def measure(variant: str, path: str, calls: int) -> float:
    """Return the CPU nanoseconds per call of ``path`` under ``variant`` (in this process)."""
    provider = setup(variant)
    before = os.environ.get(BEFORE_VARIABLE)
    if before:  # ahead of the editable install
        sys.path.insert(0, before)
    from idempotent_lambda import InMemoryPersistenceLayer, idempotent_function

    assert not before or sys.modules["idempotent_lambda"].__file__.startswith(before)

    @idempotent_function(
        data_keyword_argument="order", persistence_store=InMemoryPersistenceLayer()
    )
    def handle(order: dict[str, Any]) -> dict[str, str]:
        return {"status": "accepted"}

    orders = [{**PAYLOAD, "order_id": n} for n in range(2 * calls + 400)]
    same = dict(PAYLOAD)
    handle(order=same)
    warm, timed = orders[:400], orders[400:]
    for order in warm:
        handle(order=order if path == "first" else same)
    chunk = calls // CHUNKS
    spent = []
    for start in range(0, chunk * CHUNKS, chunk):
        started = time.process_time_ns()
        for order in timed[start : start + chunk]:
            handle(order=order if path == "first" else same)
        if provider is not None:
            provider.force_flush()
        spent.append(time.process_time_ns() - started)
    if provider is not None:
        provider.shutdown()
    return min(spent) / chunk


def run_worker(variant: str, path: str, calls: int, before: str | None = None) -> float:
    """Measure one variant and path in a fresh interpreter; return CPU ns per call.

    ``before``: import the package from this directory (the library without tracing), with
    OpenTelemetry not imported.
    """
    environment = dict(os.environ)
    if before is not None:
        environment[BEFORE_VARIABLE] = before
        variant = VARIANTS[0]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_tracing", "--worker", variant, path, str(calls)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=environment,
    )
    return float(json.loads(done.stdout)["ns_per_call"])


def main(argv: list[str] | None = None) -> int:
    """Run every variant and path ``--rounds`` times, in turns; print a Markdown table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_tracing")
    parser.add_argument("--calls", type=int, default=5000, help="timed calls per measurement")
    parser.add_argument("--rounds", type=int, default=7, help="measurements per variant")
    parser.add_argument("--worker", nargs=3, metavar=("VARIANT", "PATH", "CALLS"))
    parser.add_argument(
        "--before", help="directory holding the package without tracing (an extra variant)"
    )
    args = parser.parse_args(argv)
    if args.worker:
        variant, path, calls = args.worker
        print(json.dumps({"ns_per_call": measure(variant, path, int(calls))}))
        return 0
    variants = (*VARIANTS, BEFORE) if args.before else VARIANTS
    found: dict[tuple[str, str], list[float]] = {(v, p): [] for v in variants for p in PATHS}
    for round_ in range(args.rounds):
        turn = variants[round_ % len(variants) :] + variants[: round_ % len(variants)]
        for path in PATHS:
            for variant in turn:
                before = args.before if variant == BEFORE else None
                found[variant, path].append(run_worker(variant, path, args.calls, before))
        print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    median = {key: statistics.median(values) / 1000 for key, values in found.items()}
    print(f"CPU µs per call, median of {args.rounds} rounds of {args.calls} calls\n")
    print("| variant | first call | vs off | replay | vs off |")
    print("|---|---:|---:|---:|---:|")
    for variant in variants:
        cells = []
        for path in PATHS:
            value, base = median[variant, path], median[VARIANTS[0], path]
            cells += [f"{value:.1f}", f"{value - base:+.1f} ({value / base:.2f}x)"]
        print(f"| {variant} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
