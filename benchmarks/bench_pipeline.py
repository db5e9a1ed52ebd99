"""Every batch source under a parallel 5 ms store: ours, ours before, Powertools, in one run.

The store model is ``bench_batches_parallel``'s (each request sleeps ``--latency-ms`` outside a
lock, so requests from different threads overlap as DynamoDB serves them); the batches and the
Powertools wiring are those of ``bench_batches`` and ``bench_kinesis_kafka``:

- ``sqs``: a standard queue; ``fifo``: 10 message groups; ``stream``: a DynamoDB stream over 20
  items; ``kinesis``: 20 partition keys; ``kafka``: 4 partitions.

Each case (source, batch size) measures, per library with its defaults:

- the first delivery and a redelivery of the whole batch (wall ms, DynamoDB requests per record,
  client CPU per record: the process's CPU time over the delivery, every thread);
- *one failing*: a first delivery whose record a tenth of the way in fails (for Kafka, its
  partition's later records are then reported, their claims released);
- the *retry*: a first delivery whose every tenth record fails, then the delivery of exactly the
  records it reported (wall ms of that second delivery).

*Before* is the library at ``--before`` (a directory holding the ``idempotent_lambda`` package of
an earlier commit, say a ``git worktree`` of main's a8c71c9 under /tmp): the same code runs in a
subprocess that imports that package instead. Every repeat runs the three side by side; the
report gives medians.

Run: ``python -m benchmarks.bench_pipeline --before /tmp/il-before-lib`` (needs the ``bench``
extra: Powertools). ``--worker`` is the subprocess side.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import bench_batches, bench_batches_parallel, bench_kinesis_kafka
from benchmarks import results as results_json
from benchmarks.bench_batches_parallel import Latency
from benchmarks.bench_sqs import LambdaContext
from benchmarks.report import command_line

SOURCES = ("sqs", "fifo", "stream", "kinesis", "kafka")
SIZES = (10, 100, 1000)
#: Send each handler one 10-record batch before measuring (``--warm``), as a warm Lambda has.
WARM = False
Body = Callable[[str], None]


def make_event(source: str, records: int, receive_count: str, run: str) -> dict[str, Any]:
    """Return a batch of ``source``; the same ``run`` gives the same records."""
    if source in bench_batches.KINDS:
        return bench_batches.make_event(source, records, receive_count, run)
    if (source, records, run) not in _STREAM_EVENTS:  # these carry no receive count
        _STREAM_EVENTS[source, records, run] = bench_kinesis_kafka.make_event(source, records)
    return _STREAM_EVENTS[source, records, run]


_STREAM_EVENTS: dict[tuple[str, int, str], dict[str, Any]] = {}


def raw_records(source: str, event: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the event's raw records in batch order."""
    if source == "kafka":
        return [raw for records in event["records"].values() for raw in records]
    return list(event["Records"])


def identifier(source: str, raw: dict[str, Any]) -> str:
    """Return what the body sees of a raw record (the benchmarks' identifier)."""
    if source in ("kinesis", "kafka"):
        return bench_kinesis_kafka.raw_identifier(raw)
    return bench_batches.identifier_of(raw)


def only(source: str, event: dict[str, Any], reported: list[Any]) -> dict[str, Any]:
    """Return ``event`` holding only the ``reported`` records (the retry Lambda sends)."""
    if source == "kafka":
        wanted = {(r["partition"], r["offset"]) for r in reported}
        kept = {
            name: [raw for raw in records if (name, raw["offset"]) in wanted]
            for name, records in event["records"].items()
        }
        return {**event, "records": {n: r for n, r in kept.items() if r}}
    ids = set(reported)
    return {**event, "Records": [raw for raw in event["Records"] if identifier(source, raw) in ids]}


def build(library: str, source: str, latency: Latency, body: Body) -> Any:
    """Return ``library``'s batch handler for ``source`` over the slow store."""
    module: Any = bench_batches_parallel if source in bench_batches.KINDS else bench_kinesis_kafka
    builder = module.build_powertools if library == "powertools" else module.build_ours
    return builder(source, latency, body)


def measure(library: str, source: str, records: int, latency_ms: float) -> dict[str, float]:
    """Measure one library on one case; return wall ms, requests and CPU per record."""
    latency = Latency(latency_ms)
    failing: set[str] = set()
    lock = threading.Lock()
    ran: list[str] = []

    def body(name: str) -> None:
        with lock:
            ran.append(name)
        if name in failing:
            raise RuntimeError("refused")

    handler = build(library, source, latency, body)
    if WARM:  # a warm Lambda: one earlier batch started the handler's threads
        handler(make_event(source, 10, "1", uuid.uuid4().hex[:8]), LambdaContext())
        ran.clear()
    run = uuid.uuid4().hex[:8]
    out: dict[str, float] = {}
    for label, receive_count in (("first", "1"), ("again", "2")):
        event = make_event(source, records, receive_count, run)
        latency.reset()
        cpu, started = time.process_time(), time.perf_counter()
        answer = handler(event, LambdaContext())
        out[f"{label}_ms"] = (time.perf_counter() - started) * 1000
        out[f"{label}_cpu_us"] = (time.process_time() - cpu) * 1e6 / records
        out[f"{label}_requests"] = latency.delivery(0).requests / records
        if answer["batchItemFailures"]:
            raise RuntimeError(f"{library} {source}: failures on a clean batch")
    if len(ran) != records:
        raise RuntimeError(f"{library} {source}: {len(ran)} runs for {records} records")

    # The retry: every tenth record fails, then Lambda sends exactly the reported records.
    handler = build(library, source, Latency(latency_ms), body)
    event = make_event(source, records, "1", uuid.uuid4().hex[:8])
    failing.update(identifier(source, raw) for raw in raw_records(source, event)[3::10])
    reported = [f["itemIdentifier"] for f in handler(event, LambdaContext())["batchItemFailures"]]
    failing.clear()
    retry = only(source, event, reported)
    if source in bench_batches.KINDS:
        for raw in raw_records(source, retry):
            if "attributes" in raw:
                raw["attributes"] = {**raw["attributes"], "ApproximateReceiveCount": "2"}
    started = time.perf_counter()
    handler(retry, LambdaContext())
    out["retry_ms"] = (time.perf_counter() - started) * 1000
    out["retried"] = len(reported)

    # A first delivery with one failing record, a tenth of the way in.
    latency = Latency(latency_ms)
    handler = build(library, source, latency, body)
    event = make_event(source, records, "1", uuid.uuid4().hex[:8])
    raws = raw_records(source, event)
    failing.add(identifier(source, raws[len(raws) // 10]))
    started = time.perf_counter()
    handler(event, LambdaContext())
    out["fail1_ms"] = (time.perf_counter() - started) * 1000
    out["fail1_requests"] = latency.delivery(0).requests / records
    failing.clear()
    return out


def measure_all(
    library: str, sizes: tuple[int, ...], latency_ms: float, warm: bool = False
) -> dict[str, Any]:
    """Measure every source at every size (after a 10-record warm-up of each source)."""
    global WARM  # noqa: PLW0603  # one switch for the whole (sub)process
    WARM = warm
    logging.disable(logging.WARNING)  # a failed record logs a line; the retry fails many
    for source in SOURCES:
        measure(library, source, 10, latency_ms)
    return {f"{s}/{n}": measure(library, s, n, latency_ms) for s in SOURCES for n in sizes}


def before(path: str, sizes: tuple[int, ...], latency_ms: float, warm: bool) -> dict[str, Any]:
    """Run `measure_all` of ours with the package under ``path`` (see `in_before`)."""
    return dict(
        in_before(path, "benchmarks.bench_pipeline:measure_all", "ours", sizes, latency_ms, warm)
    )


def in_before(path: str, target: str, *args: Any) -> Any:
    """Return ``target(*args)`` run in a subprocess that imports the package under ``path``.

    ``target`` is ``"module:function"``; the arguments and the result travel as JSON.
    """
    code = (
        "import sys, json, importlib; sys.path.insert(0, sys.argv[1]);"
        "import idempotent_lambda; assert idempotent_lambda.__file__.startswith(sys.argv[1]);"
        "module, name = sys.argv[2].split(':');"
        "function = getattr(importlib.import_module(module), name);"
        "print(json.dumps(function(*json.loads(sys.argv[3]))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, path, target, json.dumps(args)],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"the run before failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(runs: list[dict[str, dict[str, Any]]], sizes: tuple[int, ...]) -> str:
    """Return the medians as a Markdown table."""

    def median(library: str, case: str, field: str) -> float:
        return statistics.median(run[library][case][field] for run in runs)

    lines = [
        "| source | records | first: before / now / Powertools ms | now/PT | before/PT "
        "| again: now / Powertools ms | now/PT | retry: before / now / PT ms "
        "| req/record first now / before / PT | CPU µs/record first now / before / PT "
        "| one failing: before / now / PT ms | now/PT | req/record now / before / PT |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for source in SOURCES:
        for size in sizes:
            case = f"{source}/{size}"
            m = {lib: {f: median(lib, case, f) for f in runs[0][lib][case]} for lib in runs[0]}
            now, old, pt = m["now"], m["before"], m["powertools"]
            lines.append(
                f"| {source} | {size} | {old['first_ms']:.0f} / {now['first_ms']:.0f} / "
                f"{pt['first_ms']:.0f} | {now['first_ms'] / pt['first_ms']:.3f}x "
                f"| {old['first_ms'] / pt['first_ms']:.3f}x "
                f"| {now['again_ms']:.0f} / {pt['again_ms']:.0f} "
                f"| {now['again_ms'] / pt['again_ms']:.3f}x "
                f"| {old['retry_ms']:.0f} / {now['retry_ms']:.0f} / {pt['retry_ms']:.0f} "
                f"| {now['first_requests']:.2f} / {old['first_requests']:.2f} / "
                f"{pt['first_requests']:.2f} "
                f"| {now['first_cpu_us']:.0f} / {old['first_cpu_us']:.0f} / "
                f"{pt['first_cpu_us']:.0f} "
                f"| {old['fail1_ms']:.0f} / {now['fail1_ms']:.0f} / {pt['fail1_ms']:.0f} "
                f"| {now['fail1_ms'] / pt['fail1_ms']:.3f}x "
                f"| {now['fail1_requests']:.2f} / {old['fail1_requests']:.2f} / "
                f"{pt['fail1_requests']:.2f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="directory holding the old package")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=5.0)
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--warm", action="store_true", help="one batch through each handler first")
    parser.add_argument("--json", help="also write every repeat's results, with the run's facts")
    args = parser.parse_args(argv)
    sizes = tuple(int(n) for n in args.sizes.split(","))
    runs = []
    for repeat in range(args.runs):
        print(f"repeat {repeat + 1}/{args.runs}", file=sys.stderr)
        runs.append(
            {
                "before": before(args.before, sizes, args.latency_ms, args.warm),
                "now": measure_all("ours", sizes, args.latency_ms, args.warm),
                "powertools": measure_all("powertools", sizes, args.latency_ms, args.warm),
            }
        )
    print(report(runs, sizes))
    if args.json:
        run = results_json.run_info(command_line("benchmarks.bench_pipeline"), None)
        results_json.write(args.json, {"run": run, "runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
