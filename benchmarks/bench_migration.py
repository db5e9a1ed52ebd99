"""DynamoDB requests and client CPU per record along the migration path from Powertools' batches.

The migration checklist moves a Powertools batch function in two steps. Its step 3 keeps
Powertools' ``BatchProcessor`` (``SqsFifoPartialProcessor`` for FIFO) with the record handler
under this library's ``idempotent_function`` ("swap"). The step after it puts the record
handler under a batch adapter with ``source_scope="powertools"`` ("adapter"), which keeps
every record's key. Both use the same key expression (the benchmarks' own, as
``bench_pipeline_cpu`` gives Powertools) and the same key prefix, on one table per source.

Per source and library, on a botocore client against moto's DynamoDB server with
``--latency-ms`` slept before each request (``bench_pipeline_cpu``'s client): first deliveries
of fresh batches, each followed by its redelivery; and the switch itself, a batch the swap
processed and then redelivered to the adapter. Reported as medians: DynamoDB requests per
record (a botocore event hook counts them) and this process's CPU per record.

Run: ``python -m benchmarks.bench_migration --runs 3 --size 100`` (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

from benchmarks.bench_pipeline import SOURCES, make_event
from benchmarks.bench_pipeline_cpu import make_client
from benchmarks.bench_sqs import LambdaContext, moto_endpoint

#: The key expression of each source's record handler, on both sides of the switch.
KEYS = {
    "sqs": "messageId",
    "fifo": "messageId",
    "stream": "[eventSourceARN, dynamodb.Keys, dynamodb.SequenceNumber]",
    "kinesis": "[eventSourceARN, eventID]",
    "kafka": "[topic, partition, offset]",
}


def swap_handler(source: str, store: Any, prefix: str) -> Any:
    """Powertools' batch processor around this library's ``idempotent_function``."""
    from aws_lambda_powertools.utilities.batch import (
        BatchProcessor,
        EventType,
        SqsFifoPartialProcessor,
        process_partial_response,
    )

    from idempotent_lambda import IdempotencyConfig, idempotent_function

    processor: Any = {
        "sqs": lambda: BatchProcessor(event_type=EventType.SQS),
        "fifo": lambda: SqsFifoPartialProcessor(skip_group_on_error=True),
        "stream": lambda: BatchProcessor(event_type=EventType.DynamoDBStreams),
        "kinesis": lambda: BatchProcessor(event_type=EventType.KinesisDataStreams),
        "kafka": lambda: BatchProcessor(event_type=EventType.Kafka),
    }[source]()
    config = IdempotencyConfig(event_key_jmespath=KEYS[source])

    @idempotent_function(
        data_keyword_argument="record", persistence_store=store, config=config, key_prefix=prefix
    )
    def record_handler(record: Any) -> dict[str, Any]:
        return {"processed": True}

    def handler(event: dict[str, Any], context: Any) -> Any:
        config.register_lambda_context(context)
        return process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )

    return handler


def adapter_handler(source: str, store: Any, prefix: str) -> Any:
    """The source's batch adapter with ``source_scope="powertools"``."""
    from idempotent_lambda import IdempotencyConfig
    from idempotent_lambda.adapters import dynamodb_stream, kafka, kinesis, sqs

    adapter: Any = {
        "sqs": sqs.idempotent_sqs_handler,
        "fifo": sqs.idempotent_sqs_handler,
        "stream": dynamodb_stream.idempotent_stream_handler,
        "kinesis": kinesis.idempotent_kinesis_handler,
        "kafka": kafka.idempotent_kafka_handler,
    }[source]

    @adapter(
        persistence_store=store,
        config=IdempotencyConfig(event_key_jmespath=KEYS[source]),
        key_prefix=prefix,
        source_scope="powertools",
    )
    def handler(record: Any, context: Any) -> dict[str, Any]:
        return {"processed": True}

    return handler


def measure(endpoint: str, latency_ms: float, runs: int, size: int) -> dict[str, Any]:
    """Return, per source, the medians of each case's requests and CPU per record."""
    from idempotent_lambda import DynamoDBPersistenceLayer
    from idempotent_lambda.testing import create_idempotency_table

    client = make_client(endpoint, latency_ms)
    requests = [0]
    client.meta.events.register(
        "before-call.dynamodb", lambda **_: requests.__setitem__(0, 1 + requests[0])
    )
    out: dict[str, Any] = {}
    for source in SOURCES:
        table = f"bench-migration-{uuid.uuid4().hex[:12]}"
        create_idempotency_table(client, table_name=table)
        store = DynamoDBPersistenceLayer(table, boto3_client=client)
        prefix = f"bench.{source}"
        handlers = {
            "swap": swap_handler(source, store, prefix),
            "adapter": adapter_handler(source, store, prefix),
        }
        for handler in handlers.values():  # warm
            handler(make_event(source, 10, "1", uuid.uuid4().hex[:8]), LambdaContext())
        samples: dict[str, list[tuple[float, float]]] = {}

        def deliver(
            handler: Any, event: dict[str, Any], where: str = source
        ) -> tuple[float, float]:
            requests[0] = 0
            started = time.process_time()
            answer = handler(event, LambdaContext())
            cpu_us = (time.process_time() - started) * 1e6 / size
            if answer["batchItemFailures"]:
                raise RuntimeError(f"{where}: failures on a clean batch")
            return requests[0] / size, cpu_us

        for turn in range(runs):
            for name in ("swap", "adapter") if turn % 2 == 0 else ("adapter", "swap"):
                run = uuid.uuid4().hex[:8]
                for case, receive in (("first", "1"), ("again", "2")):
                    event = make_event(source, size, receive, run)
                    samples.setdefault(f"{name} {case}", []).append(deliver(handlers[name], event))
            run = uuid.uuid4().hex[:8]
            handlers["swap"](make_event(source, size, "1", run), LambdaContext())
            event = make_event(source, size, "2", run)
            samples.setdefault("switch", []).append(deliver(handlers["adapter"], event))
        out[source] = {
            case: (statistics.median(r for r, _ in values), statistics.median(c for _, c in values))
            for case, values in samples.items()
        }
    return out


CASES = ("swap first", "swap again", "adapter first", "adapter again", "switch")


def report(results: dict[str, Any]) -> str:
    """Return the results as a Markdown table."""
    lines = [
        "| source | "
        + " | ".join(f"{case}: requests / CPU µs per record" for case in CASES)
        + " |",
        "|---|" + "---|" * len(CASES),
    ]
    for source, cases in results.items():
        cells = [f"{cases[c][0]:.2f} / {cases[c][1]:.0f}" for c in CASES]
        lines.append(f"| {source} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run both steps of the migration on one moto server and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="deliveries per case")
    parser.add_argument("--size", type=int, default=100, help="records per batch")
    parser.add_argument("--latency-ms", type=float, default=5.0)
    parser.add_argument("--in-process", action="store_true", help="run moto in this process")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with moto_endpoint(args.in_process) as endpoint:
        results = measure(endpoint, args.latency_ms, args.runs, args.size)
    print(report(results))
    print(f"\n(took {time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
