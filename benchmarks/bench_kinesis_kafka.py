"""Kinesis and Kafka batches under a parallel 5 ms store: ours vs Powertools' BatchProcessor.

The store model, the checks and the cost rules are those of ``bench_batches_parallel``: each
library gets an in-process dict behind a wrapper that sleeps ``--latency-ms`` (5 ms by default)
per request, outside a lock, so requests from different threads overlap as DynamoDB serves
them. Batches (100 records by default):

- ``kinesis``: one shard's batch over 20 partition keys, interleaved (record ``n`` has key
  ``n % 20``); Powertools: ``BatchProcessor(EventType.KinesisDataStreams)``, key
  ``[eventSourceARN, eventID]``;
- ``kafka``: 4 partitions of one topic, 25 records each in offset order; Powertools:
  ``BatchProcessor(EventType.Kafka)``, key ``[topic, partition, offset]``.

Powertools' record handler runs under ``idempotent_function``; ours is the adapter with its
defaults (default key, 16 lanes). A redelivery resends the same batch. Every run checks that
each record ran exactly once across the two deliveries, with no failure reported. A separate
run fails every tenth record and compares where Lambda resumes: the lowest reported sequence
number (Kinesis), and the lowest reported offset of each partition (Kafka).

Run: ``python -m benchmarks.bench_kinesis_kafka`` (needs the ``bench`` extra: Powertools).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from benchmarks.bench_batches import READ_PRICE, WRITE_PRICE, Result, _cost, _median, _ops
from benchmarks.bench_batches_parallel import Latency, SlowPowertoolsStore, SlowStore
from benchmarks.bench_sqs import BenchmarkError, LambdaContext

Handler = Callable[[dict[str, Any], Any], Any]
Body = Callable[[str], None]
KINDS = ("kinesis", "kafka")
TARGETS = {"kinesis": 0.2, "kafka": 0.3}  # first delivery; redelivery is 0.05 for both
REDELIVERY_TARGET = 0.05
STREAM_ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/bench-clicks"
CLUSTER_ARN = "arn:aws:kafka:us-east-1:123456789012:cluster/bench-orders/abc-1"


def make_event(kind: str, records: int) -> dict[str, Any]:
    """Return a fresh batch of ``records`` of ``kind`` (new sequence numbers or offsets)."""
    from idempotent_lambda.testing import (
        KafkaRecordFields,
        KinesisRecordFields,
        kafka_event,
        kinesis_event,
    )

    run = uuid.uuid4().hex[:8]
    if kind == "kinesis":
        fields = [
            KinesisRecordFields(partition_key=f"user-{n % 20}", data={"run": run, "n": n})
            for n in range(records)
        ]
        return kinesis_event(records=fields, stream_arn=STREAM_ARN)
    per_partition = max(records // 4, 1)
    return kafka_event(
        records=[
            KafkaRecordFields(partition=n // per_partition, value={"run": run, "n": n})
            for n in range(records)
        ],
        topic=f"orders-{run}",
        cluster_arn=CLUSTER_ARN,
    )


def identifier(record: Any) -> str:
    """Return a record's position (either library's record classes)."""
    if hasattr(record, "offset"):
        return f"{record.partition}:{record.offset}"
    if hasattr(record, "kinesis"):  # Powertools' KinesisStreamRecord
        return str(record.kinesis.sequence_number)
    return str(record.sequence_number)


def raw_identifier(raw: dict[str, Any]) -> str:
    """Return a raw record's position, as `identifier` names it."""
    if "offset" in raw:
        return f"{raw['partition']}:{raw['offset']}"
    return str(raw["kinesis"]["sequenceNumber"])


def raw_records(kind: str, event: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the batch's raw records."""
    if kind == "kinesis":
        return list(event["Records"])
    return [record for records in event["records"].values() for record in records]


def build_powertools(kind: str, latency: Latency, body: Body) -> Handler:
    """Powertools: its batch processor for ``kind`` + ``idempotent_function`` per record."""
    return powertools_handler(kind, SlowPowertoolsStore(latency), body)


def powertools_handler(kind: str, layer: Any, body: Body) -> Handler:
    """Powertools' batch processor for ``kind`` + ``idempotent_function`` on ``layer``."""
    from aws_lambda_powertools.utilities.batch import (
        BatchProcessor,
        EventType,
        process_partial_response,
    )
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function

    if kind == "kinesis":
        processor = BatchProcessor(event_type=EventType.KinesisDataStreams)
        key = "[eventSourceARN, eventID]"
    else:
        processor = BatchProcessor(event_type=EventType.Kafka)
        key = "[topic, partition, offset]"
    config = IdempotencyConfig(event_key_jmespath=key)

    @idempotent_function(  # type: ignore[untyped-decorator]  # Powertools types it loosely
        data_keyword_argument="record",
        config=config,
        persistence_store=layer,
    )
    def record_handler(record: Any) -> dict[str, Any]:
        body(identifier(record))
        return {"processed": identifier(record)}

    def handler(event: dict[str, Any], context: Any) -> Any:
        config.register_lambda_context(context)
        return process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )

    return handler


def build_ours(kind: str, latency: Latency, body: Body) -> Handler:
    """Ours: the adapter for ``kind`` with its defaults (default keys, 16 lanes)."""
    from idempotent_lambda.adapters.kafka import idempotent_kafka_handler
    from idempotent_lambda.adapters.kinesis import idempotent_kinesis_handler

    adapter: Any = idempotent_kinesis_handler if kind == "kinesis" else idempotent_kafka_handler

    @adapter(persistence_store=SlowStore(latency))
    def handler(record: Any, context: Any) -> dict[str, Any]:
        body(identifier(record))
        return {"processed": identifier(record)}

    return handler  # type: ignore[no-any-return]


VARIANTS: dict[str, Callable[[str, Latency, Body], Handler]] = {
    "powertools": build_powertools,
    "ours": build_ours,
}


def run_once(builder: Any, kind: str, *, records: int, latency_ms: float) -> tuple[Any, Any]:
    """Measure a first delivery and a full redelivery of one batch, on fresh stores."""
    latency = Latency(latency_ms)
    ran: Counter[str] = Counter()
    lock = threading.Lock()

    def body(name: str) -> None:
        with lock:
            ran[name] += 1

    handler = builder(kind, latency, body)
    event = make_event(kind, records)
    deliveries = []
    for _delivery in range(2):
        latency.reset()
        started = time.perf_counter()
        response = handler(event, LambdaContext())
        wall = time.perf_counter() - started
        if response.get("batchItemFailures"):
            raise BenchmarkError(f"{kind}: {len(response['batchItemFailures'])} failures reported")
        deliveries.append(latency.delivery(wall))
    wanted = Counter(raw_identifier(raw) for raw in raw_records(kind, event))
    if ran != wanted:
        raise BenchmarkError(f"{kind}: not one execution per record across deliveries: {ran}")
    return deliveries[0], deliveries[1]


def resume_points(kind: str, answer: list[Any]) -> dict[str, int]:
    """Return where Lambda resumes after ``answer``: per partition for Kafka, else one point."""
    points: dict[str, int] = {}
    for identifier_ in answer:
        if kind == "kafka":
            name, offset = identifier_["partition"], identifier_["offset"]
        else:
            name, offset = "shard", int(identifier_)
        points[name] = min(offset, points.get(name, offset))
    return points


def failure_answers(kind: str, records: int, latency_ms: float) -> dict[str, list[Any]]:
    """Return each variant's answer to a batch whose every tenth record fails."""
    event = make_event(kind, records)
    failing = {raw_identifier(raw) for raw in raw_records(kind, event)[3::10]}
    answers = {}
    for variant, builder in VARIANTS.items():

        def body(name: str) -> None:
            if name in failing:
                raise RuntimeError("refused")

        response = builder(kind, Latency(latency_ms), body)(event, LambdaContext())
        answers[variant] = [f["itemIdentifier"] for f in response["batchItemFailures"]]
    return answers


def run_all(args: argparse.Namespace) -> list[Result]:
    """Run every kind, alternating the variants run by run, after a discarded warm-up each."""
    results = {(kind, variant): Result(kind, variant) for kind in KINDS for variant in VARIANTS}
    for kind in KINDS:
        for builder in VARIANTS.values():
            run_once(builder, kind, records=10, latency_ms=args.latency_ms)
        for _ in range(args.runs):
            for variant, builder in VARIANTS.items():
                first, again = run_once(
                    builder, kind, records=args.records, latency_ms=args.latency_ms
                )
                results[kind, variant].first.append(first)
                results[kind, variant].again.append(again)
    return list(results.values())


def report(results: list[Result], answers: dict[str, dict[str, list[Any]]], args: Any) -> str:
    """Return the results as Markdown tables."""
    lines = [
        f"Batches of {args.records} records, {args.latency_ms:g} ms per store request (requests "
        f"overlap), median of {args.runs} runs; load average when it started: {args.load}.",
        "",
        "| batch | delivery | Powertools | ours | ours / Powertools (range) | target "
        "| store requests (Powertools; ours) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    costs = [
        "| batch | delivery | Powertools WRU + RRU | ours WRU + RRU | Powertools $/M records "
        "| ours $/M records |",
        "|---|---|---:|---:|---:|---:|",
    ]
    verdicts = []
    for kind in KINDS:
        theirs, ours = (
            next(r for r in results if (r.kind, r.variant) == (kind, v)) for v in VARIANTS
        )
        for label, target, pick in (
            ("first", TARGETS[kind], lambda r: r.first),
            ("redelivery", REDELIVERY_TARGET, lambda r: r.again),
        ):
            t, o = _median(pick(theirs)), _median(pick(ours))
            ratio = o.wall_s / t.wall_s
            spread = [d.wall_s / p.wall_s for d, p in zip(pick(ours), pick(theirs), strict=True)]
            verdicts.append(ratio <= target)
            lines.append(
                f"| {kind} | {label} | {t.wall_s * 1000:.0f} ms | {o.wall_s * 1000:.1f} ms | "
                f"{ratio:.3f}x ({min(spread):.3f}-{max(spread):.3f}) | <= {target}x "
                f"{'met' if ratio <= target else 'NOT met'} | {_ops(t)}; {_ops(o)} |"
            )
            costs.append(
                f"| {kind} | {label} | {t.write_units} + {t.read_units} | {o.write_units} + "
                f"{o.read_units} | {_cost(t, args.records):.3f} | {_cost(o, args.records):.3f} |"
            )
    same = []
    for kind in KINDS:
        theirs_at, ours_at = (resume_points(kind, answers[kind][v]) for v in VARIANTS)
        verdicts.append(theirs_at == ours_at)
        same.append(
            f"{kind}: resumes at the {'same' if theirs_at == ours_at else 'DIFFERENT'} "
            f"place (Powertools reports {len(answers[kind]['powertools'])}, ours "
            f"{len(answers[kind]['ours'])})"
        )
    return "\n".join(
        [
            *lines,
            "",
            f"Request units per batch of {args.records}, and on-demand cost per million records "
            f"(${WRITE_PRICE}/M WRU, ${READ_PRICE}/M RRU):",
            "",
            *costs,
            "",
            "One execution per record across the two deliveries: checked on every run.",
            "With every tenth record failing: " + "; ".join(same),
            f"All targets met: {'yes' if all(verdicts) else 'NO'}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the report; exit 1 when a run misbehaved or a target missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--latency-ms", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    args.load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    os.environ.pop("POWERTOOLS_IDEMPOTENCY_DISABLED", None)
    os.environ.pop("IDEMPOTENCY_DISABLED", None)
    try:
        results = run_all(args)
        answers = {kind: failure_answers(kind, args.records, args.latency_ms) for kind in KINDS}
    except BenchmarkError as exc:
        print(f"benchmark aborted: {exc}", file=sys.stderr)
        return 1
    text = report(results, answers, args)
    print(text)
    return 0 if text.endswith("yes") else 1


if __name__ == "__main__":
    raise SystemExit(main())
