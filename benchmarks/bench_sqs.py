"""SQS batch of 100 records against a local moto server: ours vs Powertools.

Variants, each on its own fresh table per run, all on the same events:

- ``powertools``: ``BatchProcessor(EventType.SQS)`` + ``process_partial_response`` with a record
  handler under ``@idempotent_function(data_keyword_argument="record")`` keyed on ``messageId``,
  Powertools' ``DynamoDBPersistenceLayer``;
- ``ours, sequential``: ``@idempotent_sqs_handler`` (records one after the other);
- ``ours, max_concurrency=N``: the same with a bounded thread pool.

Both record handlers do the same artificial work: ``time.sleep`` of ``--work-ms`` (10 ms by
default), standing for the downstream call a real consumer makes per message. Each variant is
measured on a first delivery (every record new) and a redelivery of the same batch (every record
replayed); wall time is ``time.perf_counter`` around the batch handler call, and DynamoDB calls
are counted with a ``before-send.dynamodb`` hook on each variant's boto3 client (every HTTP
request, retries included). Both libraries get identical clients (``max_pool_connections=32``).

The moto server runs in a separate process by default (``python -m moto.server`` on 127.0.0.1)
so its request handling does not compete with the benchmark for the GIL; ``--in-process`` uses
``ThreadedMotoServer`` instead, ``--endpoint URL`` any DynamoDB-compatible server. A warm-up run
is discarded; the median of ``--runs`` runs is reported. Every run is checked: the handler must
run once per record on the first delivery and never on the redelivery, with no failures, else
the benchmark aborts.

Run: ``python -m benchmarks.bench_sqs`` (needs the ``bench`` extra: Powertools and moto).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

Handler = Callable[[dict[str, Any], Any], Any]
#: Build a batch handler on (table name, boto3 client, per-record work).
Builder = Callable[[str, Any, Callable[[], None]], Handler]
REGION = "us-east-1"
QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:bench-orders"


# --- variants ----------------------------------------------------------------------------------


def build_powertools(table: str, client: Any, work: Callable[[], None]) -> Handler:
    """Powertools: BatchProcessor + idempotent_function on each record, keyed on messageId."""
    from aws_lambda_powertools.utilities.batch import (
        BatchProcessor,
        EventType,
        process_partial_response,
    )
    from aws_lambda_powertools.utilities.idempotency import (
        DynamoDBPersistenceLayer,
        IdempotencyConfig,
        idempotent_function,
    )

    layer = DynamoDBPersistenceLayer(table_name=table, boto3_client=client)
    config = IdempotencyConfig(event_key_jmespath="messageId")
    processor = BatchProcessor(event_type=EventType.SQS)

    @idempotent_function(  # type: ignore[untyped-decorator]  # Powertools types it loosely
        data_keyword_argument="record", config=config, persistence_store=layer
    )
    def record_handler(record: Any) -> dict[str, Any]:
        work()
        return {"processed": record.message_id}

    def handler(event: dict[str, Any], context: Any) -> Any:
        config.register_lambda_context(context)
        return process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )

    return handler


def build_ours(max_concurrency: int) -> Builder:
    """Ours: ``idempotent_sqs_handler`` (default key: the message id)."""

    def build(table: str, client: Any, work: Callable[[], None]) -> Handler:
        from idempotent_lambda import DynamoDBPersistenceLayer
        from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler

        store = DynamoDBPersistenceLayer(table, boto3_client=client)

        @idempotent_sqs_handler(persistence_store=store, max_concurrency=max_concurrency)
        def handler(record: SQSRecord, context: Any) -> dict[str, Any]:
            work()
            return {"processed": record.message_id}

        return handler

    return build


# --- measuring ---------------------------------------------------------------------------------


@dataclass
class Delivery:
    """One delivery of the batch: wall seconds and DynamoDB requests."""

    wall_s: float
    calls: int


@dataclass
class VariantResult:
    """Every run of one variant."""

    name: str
    first: list[Delivery] = field(default_factory=list)
    redelivery: list[Delivery] = field(default_factory=list)

    @staticmethod
    def _median(deliveries: list[Delivery]) -> Delivery:
        return Delivery(
            wall_s=statistics.median(d.wall_s for d in deliveries),
            calls=round(statistics.median(d.calls for d in deliveries)),
        )

    @property
    def first_median(self) -> Delivery:
        """Median first delivery."""
        return self._median(self.first)

    @property
    def redelivery_median(self) -> Delivery:
        """Median redelivery."""
        return self._median(self.redelivery)


class BenchmarkError(Exception):
    """A run did not do what it was supposed to; its numbers would be meaningless."""


class LambdaContext:
    """The Lambda context both libraries read: a deadline ten minutes away."""

    function_name = "bench-sqs"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:bench-sqs"
    memory_limit_in_mb = 1024
    aws_request_id = "c6af9ac6-7b61-11e6-9a41-93e8deadbeef"
    log_group_name = "/aws/lambda/bench-sqs"
    log_stream_name = "2026/01/01/[$LATEST]0123456789abcdef"

    def __init__(self) -> None:
        self._deadline = time.monotonic() + 600

    def get_remaining_time_in_millis(self) -> int:
        """Return the milliseconds left before the (far) deadline."""
        return int((self._deadline - time.monotonic()) * 1000)


def make_event(records: int) -> dict[str, Any]:
    """Return an SQS event of ``records`` new messages, each with a JSON order body."""
    run = uuid.uuid4().hex[:8]
    return {
        "Records": [
            {
                "messageId": f"{run}-{n:04d}-{uuid.uuid4()}",
                "receiptHandle": f"handle-{n}",
                "body": json.dumps({"order_id": f"o-{run}-{n}", "amount": "19.99"}),
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": "1523232000000",
                    "SenderId": "123456789012",
                    "ApproximateFirstReceiveTimestamp": "1523232000001",
                },
                "messageAttributes": {},
                "md5OfBody": "0",
                "eventSource": "aws:sqs",
                "eventSourceARN": QUEUE_ARN,
                "awsRegion": REGION,
            }
            for n in range(records)
        ]
    }


def make_client(endpoint: str) -> tuple[Any, list[int]]:
    """Return a dynamodb client for ``endpoint`` and the one-element list counting its requests."""
    import boto3.session
    from botocore.config import Config

    client = boto3.session.Session().client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        config=Config(max_pool_connections=32, retries={"max_attempts": 3, "mode": "standard"}),
    )
    counter = [0]
    lock = threading.Lock()

    def count(**_: Any) -> None:
        with lock:
            counter[0] += 1

    client.meta.events.register("before-send.dynamodb", count)
    return client, counter


def run_once(builder: Builder, endpoint: str, records: int, work_ms: float) -> tuple[Delivery, ...]:
    """Measure one first delivery and one redelivery on a fresh table."""
    from idempotent_lambda.testing import create_idempotency_table

    client, counter = make_client(endpoint)
    table = f"bench-sqs-{uuid.uuid4().hex[:12]}"
    create_idempotency_table(client, table_name=table)
    executions = [0]
    lock = threading.Lock()

    def work() -> None:
        with lock:
            executions[0] += 1
        time.sleep(work_ms / 1000)

    handler = builder(table, client, work)
    event = make_event(records)
    client.describe_table(TableName=table)  # warm the connection pool's first connection
    deliveries = []
    for expected_runs in (records, 0):
        executions[0], counter[0] = 0, 0
        started = time.perf_counter()
        response = handler(event, LambdaContext())
        wall = time.perf_counter() - started
        failures = response.get("batchItemFailures")
        if failures or executions[0] != expected_runs:
            raise BenchmarkError(
                f"expected {expected_runs} executions and no failures, got {executions[0]} "
                f"executions and {len(failures or [])} failures"
            )
        deliveries.append(Delivery(wall_s=wall, calls=counter[0]))
    client.delete_table(TableName=table)
    return tuple(deliveries)


def server_floor(endpoint: str, *, requests: int, concurrency: int, runs: int) -> float:
    """Return the median seconds the server needs for ``requests`` conditional PutItems.

    Sent from ``concurrency`` threads with no handler work: the least time any client can take
    for the first delivery's writes against this server (moto handles requests one at a time
    under its GIL, so more threads do not make it faster).
    """
    from concurrent.futures import ThreadPoolExecutor

    from idempotent_lambda.testing import create_idempotency_table

    client, _ = make_client(endpoint)
    table = f"bench-floor-{uuid.uuid4().hex[:12]}"
    create_idempotency_table(client, table_name=table)

    def put(_: int) -> None:
        client.put_item(
            TableName=table,
            Item={"id": {"S": str(uuid.uuid4())}, "status": {"S": "IN_PROGRESS"}},
            ConditionExpression="attribute_not_exists(#id)",
            ExpressionAttributeNames={"#id": "id"},
        )

    timings = []
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(put, range(concurrency)))
        for _run in range(runs):
            started = time.perf_counter()
            list(pool.map(put, range(requests)))
            timings.append(time.perf_counter() - started)
    client.delete_table(TableName=table)
    return statistics.median(timings)


def run_all(
    endpoint: str, *, records: int, work_ms: float, runs: int, concurrency: int
) -> list[VariantResult]:
    """Run every variant ``runs`` times (after one discarded warm-up), interleaved."""
    variants: list[tuple[str, Builder]] = [
        ("powertools BatchProcessor", build_powertools),
        ("ours, sequential", build_ours(1)),
        (f"ours, max_concurrency={concurrency}", build_ours(concurrency)),
    ]
    results = [VariantResult(name) for name, _ in variants]
    for _, builder in variants:
        run_once(builder, endpoint, min(records, 10), work_ms)
    for run in range(runs):
        order = variants[run % len(variants) :] + variants[: run % len(variants)]
        for name, builder in order:
            first, redelivery = run_once(builder, endpoint, records, work_ms)
            result = next(r for r in results if r.name == name)
            result.first.append(first)
            result.redelivery.append(redelivery)
    return results


# --- server ------------------------------------------------------------------------------------


@contextlib.contextmanager
def moto_endpoint(in_process: bool) -> Iterator[str]:
    """Yield the URL of a moto server on 127.0.0.1, stopped afterwards."""
    if in_process:
        from idempotent_lambda.testing import local_dynamodb

        with local_dynamodb() as endpoint:
            yield endpoint
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise BenchmarkError("the moto server did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


# --- report ------------------------------------------------------------------------------------


def report(
    results: list[VariantResult], *, records: int, work_ms: float, runs: int, floor_s: float
) -> str:
    """Return the results as a Markdown table plus the ratios and floors."""
    baseline = results[0].first_median.wall_s
    lines = [
        f"SQS batch of {records} records, {work_ms:g} ms of simulated downstream I/O per record "
        f"(time.sleep), median of {runs} runs",
        "",
        "| variant | first delivery | calls | redelivery | calls | first vs Powertools |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        first, again = result.first_median, result.redelivery_median
        lines.append(
            f"| {result.name} | {first.wall_s * 1000:.0f} ms | {first.calls} | "
            f"{again.wall_s * 1000:.0f} ms | {again.calls} | {first.wall_s / baseline:.2f}x |"
        )
    concurrent = results[-1].first_median
    ours = [r for r in results if r.name.startswith("ours")]
    at_floor = all(
        r.first_median.calls == 2 * records and r.redelivery_median.calls == records for r in ours
    )
    ratio = concurrent.wall_s / baseline
    lines += [
        "",
        f"target first delivery <= 0.2x Powertools with the concurrent option: "
        f"{ratio:.2f}x ({'met' if ratio <= 0.2 else 'NOT met'})",
        f"calls at the floor (2 per new record, 1 per replayed): {'yes' if at_floor else 'NO'}",
        f"server floor: {2 * records} conditional PutItems take {floor_s * 1000:.0f} ms on this "
        f"server even with no handler work ({floor_s / baseline:.2f}x Powertools); the "
        f"concurrent variant is {concurrent.wall_s / floor_s:.2f}x that floor",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the report; exit 1 when a run misbehaved."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--work-ms", type=float, default=10.0, help="simulated I/O per record")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--endpoint", help="use this DynamoDB-compatible server instead of moto")
    parser.add_argument("--in-process", action="store_true", help="run moto in this process")
    parser.add_argument("--json", action="store_true", help="print raw results as JSON too")
    args = parser.parse_args(argv)
    os.environ.pop("POWERTOOLS_IDEMPOTENCY_DISABLED", None)
    os.environ.pop("IDEMPOTENCY_DISABLED", None)
    os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
    endpoint_cm = (
        contextlib.nullcontext(args.endpoint) if args.endpoint else moto_endpoint(args.in_process)
    )
    try:
        with endpoint_cm as endpoint:
            results = run_all(
                endpoint,
                records=args.records,
                work_ms=args.work_ms,
                runs=args.runs,
                concurrency=args.concurrency,
            )
            floor_s = server_floor(
                endpoint, requests=2 * args.records, concurrency=args.concurrency, runs=args.runs
            )
    except BenchmarkError as exc:
        print(f"benchmark aborted: {exc}", file=sys.stderr)
        return 1
    print(
        report(results, records=args.records, work_ms=args.work_ms, runs=args.runs, floor_s=floor_s)
    )
    if args.json:
        print(json.dumps([_as_dict(r) for r in results], indent=2))
    return 0


def _as_dict(result: VariantResult) -> dict[str, Any]:
    return {
        "variant": result.name,
        "first": [vars(d) for d in result.first],
        "redelivery": [vars(d) for d in result.redelivery],
    }


if __name__ == "__main__":
    raise SystemExit(main())
