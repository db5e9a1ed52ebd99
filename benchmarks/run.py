"""Entry point: ``python -m benchmarks.run [options]`` (``make bench`` runs it with none).

Runs the selected suites (all by default) side by side against Powertools, prints a Markdown
report and, with ``--write``, puts it into ``docs/benchmarks.md`` between the result markers;
with ``--json PATH`` it also writes the results as JSON (``benchmarks/results.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from benchmarks import cpu, imports, report, roundtrips
from benchmarks import results as results_json
from benchmarks.events import event_factories

SUITES = ("cpu", "roundtrips", "imports")
DEFAULT_DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="Benchmark idempotent_lambda against Powertools' Idempotency utility.",
    )
    parser.add_argument(
        "-s",
        "--suite",
        action="append",
        choices=SUITES,
        help="suite to run (repeatable; default: all)",
    )
    parser.add_argument(
        "-n",
        "--iterations",
        type=int,
        default=2000,
        help="calls per timed loop for the small event (default: 2000)",
    )
    parser.add_argument(
        "--large-iterations",
        type=int,
        default=60,
        help="calls per timed loop for the large event (default: 60)",
    )
    parser.add_argument(
        "-r", "--repeats", type=int, default=7, help="timed loops per variant (default: 7)"
    )
    parser.add_argument(
        "--import-runs",
        type=int,
        default=15,
        help="fresh interpreters per imported module (default: 15; at least 10)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 200 / 8 calls per loop, 3 repeats, 10 import runs",
    )
    parser.add_argument(
        "--write",
        nargs="?",
        const=DEFAULT_DOC,
        type=Path,
        metavar="PATH",
        help=f"write the report between the markers of PATH (default: {DEFAULT_DOC})",
    )
    parser.add_argument(
        "--json",
        type=Path,
        metavar="PATH",
        help="also write the results as JSON to PATH (what `make charts` draws from)",
    )
    parser.add_argument(
        "--check", action="store_true", help="exit with status 1 when a guard is missed"
    )
    return parser


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; return the process exit status."""
    args = _parser().parse_args(argv)
    if args.quick:
        args.iterations, args.large_iterations, args.repeats, args.import_runs = 200, 8, 3, 10
    if min(args.iterations, args.large_iterations, args.repeats) < 1 or args.import_runs < 10:
        _parser().error("iterations and repeats must be >= 1, --import-runs >= 10")
    suites = args.suite or list(SUITES)
    results = report.Results(command=report.command_line(), load_before=os.getloadavg())
    started = time.perf_counter()
    factories = event_factories()
    # Imports first (subprocesses only), CPU next (before moto is imported into this process and
    # while no server thread competes for the GIL), round trips last.
    if "imports" in suites:
        results.imports = imports.run(args.import_runs, progress=_progress)
    if "cpu" in suites:
        results.cpu = cpu.run(
            factories,
            iterations=args.iterations,
            large_iterations=args.large_iterations,
            repeats=args.repeats,
            progress=_progress,
        )
    if "roundtrips" in suites:
        results.roundtrips = roundtrips.run(factories[0], progress=_progress)
    _progress(f"done in {time.perf_counter() - started:.0f}s")
    block = report.render(results)
    print(block)
    if args.write is not None:
        report.write(args.write, block)
        _progress(f"wrote {args.write}")
    if args.json is not None:
        results_json.write(args.json, results_json.suites_json(results))
        _progress(f"wrote {args.json}")
    return 1 if args.check and report.failed_targets(results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
