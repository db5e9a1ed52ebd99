"""Client CPU per record of a batch on real DynamoDB clients: ours before, now, and Powertools.

``bench_pipeline`` measures under an in-process store whose requests cost no CPU at all, so
there a thread handoff or a wake-up is most of a record's CPU, and the pipeline's extra handoffs
(a claim sent ahead, a completion written behind) weigh more than they would on Lambda. Here
every library runs on a botocore client against moto's DynamoDB server on 127.0.0.1, with
``--latency-ms`` (5 ms) slept before each request goes out, so each request also costs the
client what a real one does: serializing, signing, sending, parsing.

Per source (the five of ``bench_pipeline``), per library: a warm handler (one 10-record batch
first), then ``--runs`` first deliveries of a fresh 100-record batch; the medians of this
process's CPU time per record (every thread; moto's server is another process) and of the
delivery's wall time. *Before* is the package at ``--before`` (as in ``bench_pipeline``), run in
a subprocess. All three libraries get clients built alike (128 connections).

Run: ``python -m benchmarks.bench_pipeline_cpu --before /tmp/il-before-lib`` (needs the
``bench`` extra: Powertools and moto).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

from benchmarks import bench_batches, bench_kinesis_kafka
from benchmarks.bench_pipeline import SOURCES, in_before, make_event
from benchmarks.bench_sqs import LambdaContext, moto_endpoint

RECORDS = 100


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


def build(library: str, source: str, table: str, client: Any) -> Any:
    """Return ``library``'s batch handler for ``source`` on ``table``, with its defaults."""

    def body(_: str) -> None:
        return None

    if library == "powertools":
        from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

        layer = DynamoDBPersistenceLayer(table_name=table, boto3_client=client)
        if source in bench_batches.KINDS:
            return bench_batches.powertools_handler(source, layer, body)
        return bench_kinesis_kafka.powertools_handler(source, layer, body)

    from idempotent_lambda import DynamoDBPersistenceLayer as Store
    from idempotent_lambda.adapters import dynamodb_stream, kafka, kinesis, sqs

    adapter: Any = {
        "sqs": sqs.idempotent_sqs_handler,
        "fifo": sqs.idempotent_sqs_handler,
        "stream": dynamodb_stream.idempotent_stream_handler,
        "kinesis": kinesis.idempotent_kinesis_handler,
        "kafka": kafka.idempotent_kafka_handler,
    }[source]

    @adapter(persistence_store=Store(table, boto3_client=client))
    def handler(record: Any, context: Any) -> None:
        return None

    return handler


def measure_all(
    library: str, endpoint: str, latency_ms: float, runs: int, tables: dict[str, str]
) -> dict[str, Any]:
    """Return, per source, the median CPU µs per record and wall ms of ``runs`` deliveries."""
    client = make_client(endpoint, latency_ms)
    out: dict[str, Any] = {}
    for source in SOURCES:
        handler = build(library, source, tables[source], client)
        handler(make_event(source, 10, "1", uuid.uuid4().hex[:8]), LambdaContext())
        cpu, wall = [], []
        for _ in range(runs):
            event = make_event(source, RECORDS, "1", uuid.uuid4().hex[:8])
            started_cpu, started = time.process_time(), time.perf_counter()
            answer = handler(event, LambdaContext())
            wall.append((time.perf_counter() - started) * 1000)
            cpu.append((time.process_time() - started_cpu) * 1e6 / RECORDS)
            if answer["batchItemFailures"]:
                raise RuntimeError(f"{library} {source}: failures on a clean batch")
        out[source] = {"cpu_us": statistics.median(cpu), "ms": statistics.median(wall)}
    return out


def report(results: dict[str, dict[str, Any]]) -> str:
    """Return the results as a Markdown table."""
    lines = [
        "| source | CPU µs/record: before / now / Powertools | now/before | now/PT "
        "| wall ms: before / now / Powertools |",
        "|---|---|---|---|---|",
    ]
    for source in SOURCES:
        old, now, pt = (results[lib][source] for lib in ("before", "now", "powertools"))
        lines.append(
            f"| {source} | {old['cpu_us']:.0f} / {now['cpu_us']:.0f} / {pt['cpu_us']:.0f} "
            f"| {now['cpu_us'] / old['cpu_us']:.2f}x | {now['cpu_us'] / pt['cpu_us']:.2f}x "
            f"| {old['ms']:.0f} / {now['ms']:.0f} / {pt['ms']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the three libraries on one moto server and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="directory holding the old package")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--latency-ms", type=float, default=5.0)
    parser.add_argument("--in-process", action="store_true", help="run moto in this process")
    args = parser.parse_args(argv)
    with moto_endpoint(args.in_process) as endpoint:
        common = (endpoint, args.latency_ms, args.runs)
        results = {
            "before": in_before(
                args.before,
                "benchmarks.bench_pipeline_cpu:measure_all",
                "ours",
                *common,
                make_tables(endpoint),
            ),
            "now": measure_all("ours", *common, make_tables(endpoint)),
            "powertools": measure_all("powertools", *common, make_tables(endpoint)),
        }
    print(report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
