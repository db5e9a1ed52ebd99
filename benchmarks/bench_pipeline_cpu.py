"""Client CPU and requests per record of a batch on real DynamoDB clients, and a wall-time model.

``bench_pipeline`` measures under an in-process store whose requests cost no CPU at all, so
there a thread handoff or a wake-up is most of a record's CPU. Here every library runs on a
botocore client against moto's DynamoDB server on 127.0.0.1, with ``--latency-ms`` (5 ms) slept
before each request goes out, so each request also costs the client what a real one does:
serializing, signing, sending, parsing.

Per source (the five of ``bench_pipeline``), per batch size (``--sizes``, 10, 100 and 1,000),
per library: a warm handler (one 10-record batch first), then first deliveries of fresh batches
(``--runs`` at 100 records, twice as many at 10, one at 1,000), each followed by its full
redelivery. Ours and Powertools take turns delivery by delivery, in one process, so the
machine's drift weighs on both alike. Reported, as medians: this process's CPU time per record
(every thread; moto's server is another process), DynamoDB requests per record (counted by a
botocore event hook on each library's client), and the delivery's wall time. *Before* is the
package at ``--before`` (as in ``bench_pipeline``), run in a subprocess. With ``--client user``
every library gets a client built alike (128 connections, botocore's default timeouts), as a
user passing ``boto3_client`` does; with ``--client own`` each builds its own from a session
(the latency and the count are hooked on the session). ``--timeout-s`` is the Lambda's deadline
(600 s by default). ``kafka-fail`` is the Kafka batch with one failing record, a tenth of the
way in: its partition's later records are reported, not run.

**The wall-time model.** A Lambda function gets a share of a core set by its memory: a whole
vCPU at 1,769 MB, ``memory / 1769`` of one below that. The model takes the wall time measured
here (this machine's core standing for one vCPU, the proxy's 5 ms for the network) and
stretches every CPU millisecond measured to ``1769 / memory`` ms:
``wall + cpu * (1769 / memory - 1)``. That is exact for a client whose CPU is all on its
critical path (Powertools' records run one after the other) and an upper bound for ours, whose
threads wait on requests while others compute. It is a model, not a measurement on Lambda.

Run: ``python -m benchmarks.bench_pipeline_cpu --before /tmp/il-before-lib`` (needs the
``bench`` extra: Powertools and moto).
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
import uuid
from typing import Any

import boto3.session

from benchmarks import bench_batches, bench_kinesis_kafka
from benchmarks import results as results_json
from benchmarks.bench_pipeline import SOURCES, identifier, in_before, make_event, raw_records
from benchmarks.bench_sqs import LambdaContext, moto_endpoint
from benchmarks.report import command_line


def make_client(endpoint: str, latency_ms: float) -> Any:
    """Return a DynamoDB client on ``endpoint`` that waits ``latency_ms`` before each request."""
    client = bench_batches.make_client(endpoint, connections=128)
    client.meta.events.register("before-send.dynamodb", lambda **_: time.sleep(latency_ms / 1000))
    return client


def make_tables(endpoint: str) -> dict[str, str]:
    """Create a fresh idempotency table per source; return their names by source."""
    from idempotent_lambda.testing import create_idempotency_table

    client = bench_batches.make_client(endpoint)
    tables = {source: f"bench-cpu-{uuid.uuid4().hex[:12]}" for source in SOURCES}
    for table in tables.values():
        create_idempotency_table(client, table_name=table)
    return tables


#: The Kafka batch with one failing record: its partition's later records are not run.
KAFKA_FAILING = "kafka-fail"
CPU_SOURCES = (*SOURCES, KAFKA_FAILING)


def failing_record(source: str, event: dict[str, Any]) -> str | None:
    """Return the identifier of the record that fails in ``event`` (None: none fails)."""
    if source != KAFKA_FAILING:
        return None
    raws = raw_records("kafka", event)
    return identifier("kafka", raws[len(raws) // 10])


def build(library: str, source: str, table: str, client: Any, failing: set[str]) -> Any:
    """Return ``library``'s batch handler for ``source`` on ``table``, with its defaults.

    ``client`` is a client (the user's style) or a session (each library builds its own);
    a record whose identifier is in ``failing`` raises.
    """
    kind = "kafka" if source == KAFKA_FAILING else source
    given: dict[str, Any] = (
        {"boto3_session": client} if isinstance(client, boto3.session.Session) else {}
    )

    def body(name: str) -> None:
        if name in failing:
            raise RuntimeError("this record fails")

    if library == "powertools":
        from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

        layer = DynamoDBPersistenceLayer(table_name=table, **(given or {"boto3_client": client}))
        if kind in bench_batches.KINDS:
            return bench_batches.powertools_handler(kind, layer, body)
        return bench_kinesis_kafka.powertools_handler(kind, layer, body)

    from idempotent_lambda import DynamoDBPersistenceLayer as Store
    from idempotent_lambda.adapters import dynamodb_stream, kafka, kinesis, sqs

    adapter: Any = {
        "sqs": sqs.idempotent_sqs_handler,
        "fifo": sqs.idempotent_sqs_handler,
        "stream": dynamodb_stream.idempotent_stream_handler,
        "kinesis": kinesis.idempotent_kinesis_handler,
        "kafka": kafka.idempotent_kafka_handler,
    }[kind]

    @adapter(persistence_store=Store(table, **(given or {"boto3_client": client})))
    def handler(record: Any, context: Any) -> None:
        if failing:
            body(bench_kinesis_kafka.identifier(record))

    return handler


class Context(LambdaContext):
    """The benchmarks' Lambda context, with a deadline ``timeout_s`` away."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__()
        self._deadline = time.monotonic() + timeout_s


def connect(endpoint: str, latency_ms: float, style: str, count: Any) -> Any:
    """Return what a library gets: a client (``user``) or a session to build its own from
    (``own``); either way each request waits ``latency_ms`` and is counted by ``count``."""
    if style == "user":
        client = make_client(endpoint, latency_ms)
        client.meta.events.register("before-call.dynamodb", count)
        return client
    os.environ["AWS_ENDPOINT_URL_DYNAMODB"] = endpoint
    session = boto3.session.Session(
        aws_access_key_id="bench", aws_secret_access_key="bench", region_name="us-east-1"
    )
    session.events.register("before-send.dynamodb", lambda **_: time.sleep(latency_ms / 1000))
    session.events.register("before-call.dynamodb", count)
    return session


def measure_all(  # noqa: PLR0917  # in_before passes arguments by position
    libraries: list[str],
    endpoint: str,
    latency_ms: float,
    runs: int,
    tables: dict[str, dict[str, str]],
    sizes: list[int] | None = None,
    style: str = "user",
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Return, per library and ``"source/size"``, the medians of first deliveries and their
    redeliveries. The libraries take turns, delivery by delivery, the first of each turn
    alternating, so the machine's drift weighs on each alike."""
    lock = threading.Lock()
    counts = dict.fromkeys(libraries, 0)
    clients = {}
    for library in libraries:

        def count(library: str = library, **_: Any) -> None:
            with lock:
                counts[library] += 1

        clients[library] = connect(endpoint, latency_ms, style, count)
    failing: set[str] = set()
    out: dict[str, dict[str, Any]] = {library: {} for library in libraries}
    for source in CPU_SOURCES:
        kind = "kafka" if source == KAFKA_FAILING else source
        table_of = {library: tables[library][kind] for library in libraries}
        handlers = {}
        for library in libraries:
            handlers[library] = build(library, source, table_of[library], clients[library], failing)
            handlers[library](make_event(kind, 10, "1", uuid.uuid4().hex[:8]), Context(timeout_s))
        for size in sizes or SIZES:
            samples: dict[str, dict[str, list[float]]] = {library: {} for library in libraries}
            for turn in range(runs_at(size, runs)):
                for library in libraries if turn % 2 == 0 else libraries[::-1]:
                    run = uuid.uuid4().hex[:8]
                    for case, receive in (("first", "1"), ("again", "2")):
                        event = make_event(kind, size, receive, run)
                        failing.clear()
                        failing.update(filter(None, [failing_record(source, event)]))
                        counts[library] = 0
                        started_cpu, started = time.process_time(), time.perf_counter()
                        answer = handlers[library](event, Context(timeout_s))
                        wall = (time.perf_counter() - started) * 1000
                        cpu = (time.process_time() - started_cpu) * 1000
                        if answer["batchItemFailures"] and not failing:
                            raise RuntimeError(f"{library} {source}: failures on a clean batch")
                        for name, value in (
                            ("cpu_us", cpu * 1000 / size),
                            ("req", counts[library] / size),
                            ("ms", wall),
                            ("cpu_ms", cpu),
                        ):
                            samples[library].setdefault(f"{case}_{name}", []).append(value)
            for library in libraries:
                medians = {k: statistics.median(v) for k, v in samples[library].items()}
                out[library][f"{source}/{size}"] = medians
    return out


SIZES = [10, 100, 1000]
#: Function memory sizes of the wall-time model, and the size that gets a whole vCPU.
MEMORY_MB = (1769, 512, 128)
FULL_VCPU_MB = 1769


def runs_at(size: int, runs: int) -> int:
    """Return how many deliveries of ``size`` records to measure: fewer for larger batches."""
    return max(1, runs * 2 if size <= 10 else runs if size <= 100 else 1)


def modelled_ms(result: dict[str, float], memory_mb: int, case: str = "first") -> float:
    """Return the modelled wall time of a delivery at ``memory_mb`` (see the module's docstring)."""
    stretch = max(FULL_VCPU_MB / memory_mb, 1.0)
    return result[f"{case}_ms"] + result[f"{case}_cpu_ms"] * (stretch - 1)


def report(results: dict[str, dict[str, Any]], sizes: list[int]) -> str:
    """Return the results as Markdown tables: measured, then the model."""
    libraries = [lib for lib in ("before", "now", "powertools") if lib in results]
    names = " / ".join(libraries)
    lines = [
        f"| source | records | CPU µs/record, first ({names}) | now/PT "
        f"| requests/record, first ({names}) | CPU µs/record, redelivery ({names}) | now/PT "
        f"| requests/record, redelivery ({names}) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    sources = [s for s in CPU_SOURCES if f"{s}/{sizes[0]}" in results["now"]]
    for source in sources:
        for size in sizes:
            row = [results[lib][f"{source}/{size}"] for lib in libraries]
            now, pt = results["now"][f"{source}/{size}"], results["powertools"][f"{source}/{size}"]

            def cells(field: str, fmt: str, row: list[dict[str, float]] = row) -> str:
                return " / ".join(format(r[field], fmt) for r in row)

            lines.append(
                f"| {source} | {size} | {cells('first_cpu_us', '.0f')} "
                f"| {now['first_cpu_us'] / pt['first_cpu_us']:.2f}x "
                f"| {cells('first_req', '.2f')} | {cells('again_cpu_us', '.0f')} "
                f"| {now['again_cpu_us'] / pt['again_cpu_us']:.2f}x "
                f"| {cells('again_req', '.2f')} |"
            )
    lines += [
        "",
        f"Modelled wall time of a first delivery, ms ({names}; a model, see above):",
        "",
        "| source | records | "
        + " | ".join(f"{m} MB" for m in MEMORY_MB)
        + " | "
        + " | ".join(f"now/PT {m} MB" for m in MEMORY_MB)
        + " |",
        "|---|---|" + "---|" * (2 * len(MEMORY_MB)),
    ]
    for source in sources:
        for size in sizes:
            row = [results[lib][f"{source}/{size}"] for lib in libraries]
            now, pt = results["now"][f"{source}/{size}"], results["powertools"][f"{source}/{size}"]
            walls = [" / ".join(f"{modelled_ms(r, m):.0f}" for r in row) for m in MEMORY_MB]
            ratios = [f"{modelled_ms(now, m) / modelled_ms(pt, m):.2f}x" for m in MEMORY_MB]
            lines.append(f"| {source} | {size} | " + " | ".join(walls + ratios) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the libraries on one moto server and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="directory holding the old package (else no before)")
    parser.add_argument("--runs", type=int, default=3, help="deliveries at 100 records")
    parser.add_argument("--sizes", default="10,100,1000", help="batch sizes, comma-separated")
    parser.add_argument("--latency-ms", type=float, default=5.0)
    parser.add_argument("--in-process", action="store_true", help="run moto in this process")
    parser.add_argument(
        "--json", help="also write the medians, with the run's facts, to this file (make charts)"
    )
    parser.add_argument(
        "--client",
        choices=("user", "own"),
        default="user",
        help="user: each library gets a boto3.client built alike; own: each builds its own",
    )
    parser.add_argument("--timeout-s", type=float, default=600.0, help="the Lambda's deadline")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    started, load = time.perf_counter(), os.getloadavg()
    with moto_endpoint(args.in_process) as endpoint:
        common = (endpoint, args.latency_ms, args.runs)
        results: dict[str, Any] = {}
        if args.before:
            results["before"] = in_before(
                args.before,
                "benchmarks.bench_pipeline_cpu:measure_all",
                ["ours"],
                *common,
                {"ours": make_tables(endpoint)},
                sizes,
            )["ours"]
        side = measure_all(
            ["ours", "powertools"],
            *common,
            {"ours": make_tables(endpoint), "powertools": make_tables(endpoint)},
            sizes,
            args.client,
            args.timeout_s,
        )
        results["now"], results["powertools"] = side["ours"], side["powertools"]
    if args.json:
        run = results_json.run_info(command_line("benchmarks.bench_pipeline_cpu"), load)
        results_json.write(args.json, {"run": {**run, "client": args.client}, **results})
    print(report(results, sizes))
    print(f"\n(took {time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
