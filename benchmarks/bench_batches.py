"""Batches under store latency: ours vs Powertools on SQS standard, SQS FIFO and stream batches.

Each delivery is a batch of 100 records against moto's DynamoDB server on 127.0.0.1, with a fixed
latency added to every DynamoDB request: a ``before-send`` hook on the boto3 client sleeps
``--latency-ms`` (5 ms by default) before each HTTP request goes out. Both libraries are handed
identically built clients, so both pay the same latency per request (retries included).

Batches (``ApproximateReceiveCount`` is "1" on the first delivery and "2" on the redelivery):

- ``sqs``: a standard queue; Powertools: ``BatchProcessor(EventType.SQS)``;
- ``fifo``: a FIFO queue, 10 message groups of 10; Powertools:
  ``SqsFifoPartialProcessor(skip_group_on_error=True)`` (the rule ours follows);
- ``stream``: a DynamoDB stream batch over 20 items, 5 changes each, interleaved; Powertools:
  ``BatchProcessor(EventType.DynamoDBStreams)``.

Powertools' record handler is wrapped in ``idempotent_function`` on its
``DynamoDBPersistenceLayer``; ours is the adapter with its defaults (16 lanes). Handlers do
``--work-ms`` of ``time.sleep`` (0 by default). Every run checks that each handler ran once per
record on the first delivery and never on the redelivery, with no failures.

A separate check runs each batch once more with a handler that fails every tenth record and
compares the partial-batch responses: SQS and FIFO must be equal; for streams, Lambda resumes
from the lowest reported sequence number, and that number must be equal (ours also lists the
records after it, which Lambda redelivers anyway).

Request units: each DynamoDB request is counted by operation (``before-call`` hook). Every item
in this benchmark is well under 1 KB, so under DynamoDB's published rules each write request
(PutItem, UpdateItem, DeleteItem; a failed conditional write too) costs 1 write request unit,
and each item read with strong consistency (GetItem, and each key of a BatchGetItem, found or
not) costs 1 read request unit. The cost per million records uses on-demand prices in
us-east-1 (November 2024): $0.625 per million write units and $0.125 per million read units.

Run: ``python -m benchmarks.bench_batches`` (needs the ``bench`` extra: Powertools and moto).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks import results as results_json
from benchmarks.bench_sqs import REGION, BenchmarkError, LambdaContext, moto_endpoint
from benchmarks.report import command_line

Handler = Callable[[dict[str, Any], Any], Any]
#: Build a batch handler on (kind, table, client, record handler body).
Builder = Callable[[str, str, Any, Callable[[str], None]], Handler]
QUEUE_ARN = f"arn:aws:sqs:{REGION}:123456789012:bench-orders"
STREAM_ARN = f"arn:aws:dynamodb:{REGION}:123456789012:table/Orders/stream/2026-01-01T00:00:00.000"
KINDS = ("sqs", "fifo", "stream")
WRITE_PRICE, READ_PRICE = 0.625, 0.125  # USD per million request units, on demand, us-east-1
WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem"})


# --- events ------------------------------------------------------------------------------------


def make_event(kind: str, records: int, receive_count: str = "1", run: str = "") -> dict[str, Any]:
    """Return a batch of ``records`` of ``kind``; the same ``run`` gives the same records."""
    if kind == "stream":
        return {"Records": [_change(n, run) for n in range(records)]}
    arn = QUEUE_ARN + (".fifo" if kind == "fifo" else "")
    out = []
    for n in range(records):
        attributes = {"ApproximateReceiveCount": receive_count, "SentTimestamp": "1767225600000"}
        if kind == "fifo":
            attributes["MessageGroupId"] = f"group-{n // (records // 10 or 1)}"
        out.append(
            {
                "messageId": f"{run}-{n:04d}",
                "receiptHandle": f"handle-{n}",
                "body": json.dumps({"order_id": f"o-{run}-{n}", "amount": "19.99"}),
                "attributes": attributes,
                "messageAttributes": {},
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": REGION,
            }
        )
    return {"Records": out}


def _change(n: int, run: str) -> dict[str, Any]:
    item = f"order-{run}-{n % 20}"
    return {
        "eventID": f"{run}-{n}",
        "eventName": "MODIFY",
        "eventSource": "aws:dynamodb",
        "awsRegion": REGION,
        "eventSourceARN": STREAM_ARN,
        "dynamodb": {
            "Keys": {"id": {"S": item}},
            "NewImage": {"id": {"S": item}, "version": {"N": str(n // 20)}},
            "SequenceNumber": f"{1000 + n:021d}",
            "SizeBytes": 60,
            "StreamViewType": "NEW_IMAGE",
        },
    }


def identifier(record: Any) -> str:
    """Return a typed record's ``itemIdentifier`` (either library's record classes)."""
    if hasattr(record, "message_id"):
        return str(record.message_id)
    sequence = getattr(record, "sequence_number", None)
    if sequence is None:  # Powertools' DynamoDBRecord
        sequence = record.dynamodb.sequence_number
    return str(sequence)


# --- variants ----------------------------------------------------------------------------------


def build_powertools(kind: str, table: str, client: Any, body: Callable[[str], None]) -> Handler:
    """Powertools: its batch processor for ``kind`` + ``idempotent_function`` per record."""
    from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

    layer = DynamoDBPersistenceLayer(table_name=table, boto3_client=client)
    return powertools_handler(kind, layer, body)


def powertools_handler(kind: str, layer: Any, body: Callable[[str], None]) -> Handler:
    """Powertools' batch processor for ``kind`` + ``idempotent_function`` on ``layer``."""
    from aws_lambda_powertools.utilities.batch import (
        BatchProcessor,
        EventType,
        SqsFifoPartialProcessor,
        process_partial_response,
    )
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function

    key = "messageId"
    processor: Any = BatchProcessor(event_type=EventType.SQS)
    if kind == "fifo":
        processor = SqsFifoPartialProcessor(skip_group_on_error=True)
    elif kind == "stream":
        key = "[eventSourceARN, dynamodb.Keys, dynamodb.SequenceNumber]"
        processor = BatchProcessor(event_type=EventType.DynamoDBStreams)
    config = IdempotencyConfig(event_key_jmespath=key)

    @idempotent_function(  # type: ignore[untyped-decorator]  # Powertools types it loosely
        data_keyword_argument="record", config=config, persistence_store=layer
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


def build_ours(kind: str, table: str, client: Any, body: Callable[[str], None]) -> Handler:
    """Ours: the adapter for ``kind`` with its defaults (default keys, 16 lanes)."""
    from idempotent_lambda import DynamoDBPersistenceLayer
    from idempotent_lambda.adapters.dynamodb_stream import idempotent_stream_handler
    from idempotent_lambda.adapters.sqs import idempotent_sqs_handler

    store = DynamoDBPersistenceLayer(table, boto3_client=client)
    adapter = idempotent_stream_handler if kind == "stream" else idempotent_sqs_handler

    @adapter(persistence_store=store)
    def handler(record: Any, context: Any) -> dict[str, Any]:
        body(identifier(record))
        return {"processed": identifier(record)}

    return handler


VARIANTS: dict[str, Builder] = {"powertools": build_powertools, "ours": build_ours}


# --- measuring ---------------------------------------------------------------------------------


@dataclass
class Delivery:
    """One delivery of a batch: wall seconds, requests by operation, request units."""

    wall_s: float
    operations: dict[str, int]
    write_units: int
    read_units: int

    @property
    def requests(self) -> int:
        """Every DynamoDB request of the delivery."""
        return sum(self.operations.values())


@dataclass
class Result:
    """Every run of one variant on one kind of batch."""

    kind: str
    variant: str
    first: list[Delivery] = field(default_factory=list)
    again: list[Delivery] = field(default_factory=list)


class Meter:
    """Hooks on a client: a fixed latency before each request, and counts of what it sends."""

    def __init__(self, client: Any, latency_ms: float) -> None:
        self.latency_s = latency_ms / 1000
        self.lock = threading.Lock()
        self.operations: Counter[str] = Counter()
        self.write_units = 0
        self.read_units = 0
        client.meta.events.register("before-call.dynamodb", self._count)
        client.meta.events.register("before-send.dynamodb", self._delay)

    def reset(self) -> None:
        """Forget what was counted."""
        with self.lock:
            self.operations.clear()
            self.write_units = self.read_units = 0

    def _delay(self, **_: Any) -> None:
        time.sleep(self.latency_s)

    def _count(self, model: Any, params: Any, **_: Any) -> None:
        name = model.name
        with self.lock:
            self.operations[name] += 1
            if name in WRITES:
                self.write_units += 1
            elif name == "GetItem":
                self.read_units += 1
            elif name == "BatchGetItem":
                request = json.loads(params["body"]) if params.get("body") else {}
                self.read_units += sum(
                    len(table["Keys"]) for table in request.get("RequestItems", {}).values()
                )

    def delivery(self, wall_s: float) -> Delivery:
        """Return what was counted as one delivery."""
        with self.lock:
            return Delivery(wall_s, dict(self.operations), self.write_units, self.read_units)


def make_client(endpoint: str, connections: int = 32) -> Any:
    """Return a dynamodb client for ``endpoint`` (both libraries get one built like this)."""
    import boto3.session
    from botocore.config import Config

    return boto3.session.Session().client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        config=Config(
            max_pool_connections=connections, retries={"max_attempts": 3, "mode": "standard"}
        ),
    )


def run_once(
    builder: Builder, kind: str, endpoint: str, *, records: int, latency_ms: float, work_ms: float
) -> tuple[Delivery, Delivery]:
    """Measure a first delivery and a full redelivery of one batch, on a fresh table."""
    from idempotent_lambda.testing import create_idempotency_table

    client = make_client(endpoint)
    table = f"bench-batch-{uuid.uuid4().hex[:12]}"
    create_idempotency_table(client, table_name=table)
    meter = Meter(client, latency_ms)
    ran: list[str] = []
    lock = threading.Lock()

    def body(name: str) -> None:
        with lock:
            ran.append(name)
        if work_ms:
            time.sleep(work_ms / 1000)

    handler = builder(kind, table, client, body)
    run = uuid.uuid4().hex[:8]
    client.describe_table(TableName=table)  # open the pool's first connection
    deliveries = []
    for receive_count, expected in (("1", records), ("2", 0)):
        event = make_event(kind, records, receive_count, run)
        ran.clear()
        meter.reset()
        started = time.perf_counter()
        response = handler(event, LambdaContext())
        wall = time.perf_counter() - started
        if response.get("batchItemFailures") or len(ran) != expected:
            raise BenchmarkError(
                f"{kind}: expected {expected} runs and no failures, got {len(ran)} runs and "
                f"{len(response.get('batchItemFailures') or [])} failures"
            )
        deliveries.append(meter.delivery(wall))
    client.delete_table(TableName=table)
    return deliveries[0], deliveries[1]


def failure_answers(kind: str, endpoint: str, records: int) -> dict[str, list[str]]:
    """Return each variant's answer to a batch whose every tenth record fails."""
    from idempotent_lambda.testing import create_idempotency_table

    answers = {}
    run = uuid.uuid4().hex[:8]
    for variant, builder in VARIANTS.items():
        client = make_client(endpoint)
        table = f"bench-fail-{uuid.uuid4().hex[:12]}"
        create_idempotency_table(client, table_name=table)
        event = make_event(kind, records, "1", run)
        failing = {identifier_of(raw) for raw in event["Records"][3::10]}

        def body(name: str, failing: set[str] = failing) -> None:
            if name in failing:
                raise RuntimeError("refused")

        response = builder(kind, table, client, body)(event, LambdaContext())
        answers[variant] = [f["itemIdentifier"] for f in response["batchItemFailures"]]
        client.delete_table(TableName=table)
    return answers


def identifier_of(raw: dict[str, Any]) -> str:
    """Return a raw record's ``itemIdentifier``."""
    return str(raw["messageId"]) if "messageId" in raw else str(raw["dynamodb"]["SequenceNumber"])


def same_answer(kind: str, answers: dict[str, list[str]]) -> bool:
    """Tell whether both answers make Lambda retry the same records."""
    ours, theirs = answers["ours"], answers["powertools"]
    if kind != "stream":
        return ours == theirs
    return min(ours, default=None) == min(theirs, default=None)  # Lambda's checkpoint


def server_floor(endpoint: str, *, records: int, latency_ms: float, runs: int) -> dict[str, float]:
    """Return the least time this server needs for each delivery's requests, no library involved.

    ``first``: ``2 * records`` conditional PutItems from 16 threads (what a first delivery
    must write); ``redelivery``: one BatchGetItem of ``records`` keys. Both pay the same added
    latency. moto handles requests one at a time, so the first floor is mostly its CPU time.
    """
    from concurrent.futures import ThreadPoolExecutor

    from idempotent_lambda.testing import create_idempotency_table

    client = make_client(endpoint)
    Meter(client, latency_ms)
    table = f"bench-floor-{uuid.uuid4().hex[:12]}"
    create_idempotency_table(client, table_name=table)
    keys = [str(uuid.uuid4()) for _ in range(records)]

    def put(n: int) -> None:
        client.put_item(
            TableName=table,
            Item={"id": {"S": keys[n % records]}, "status": {"S": "COMPLETED"}},
            ConditionExpression="attribute_not_exists(#id) OR #s = :s",
            ExpressionAttributeNames={"#id": "id", "#s": "status"},
            ExpressionAttributeValues={":s": {"S": "COMPLETED"}},
        )

    def read() -> None:
        client.batch_get_item(
            RequestItems={table: {"Keys": [{"id": {"S": k}} for k in keys], "ConsistentRead": True}}
        )

    firsts, agains = [], []
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, range(16)))
        for _ in range(runs):
            started = time.perf_counter()
            list(pool.map(put, range(2 * records)))
            firsts.append(time.perf_counter() - started)
            started = time.perf_counter()
            read()
            agains.append(time.perf_counter() - started)
    client.delete_table(TableName=table)
    return {"first": statistics.median(firsts), "redelivery": statistics.median(agains)}


def run_all(endpoint: str, args: argparse.Namespace) -> list[Result]:
    """Run every kind and variant ``args.runs`` times, after a discarded warm-up each."""
    results = []
    for kind in KINDS:
        for variant, builder in VARIANTS.items():
            options = {
                "records": args.records,
                "latency_ms": args.latency_ms,
                "work_ms": args.work_ms,
            }
            run_once(builder, kind, endpoint, **{**options, "records": 10})
            result = Result(kind, variant)
            for _ in range(args.runs):
                first, again = run_once(builder, kind, endpoint, **options)
                result.first.append(first)
                result.again.append(again)
            results.append(result)
    return results


# --- report ------------------------------------------------------------------------------------


def _median(deliveries: list[Delivery]) -> Delivery:
    middle = sorted(deliveries, key=lambda d: d.wall_s)[len(deliveries) // 2]
    return Delivery(
        statistics.median(d.wall_s for d in deliveries),
        middle.operations,
        middle.write_units,
        middle.read_units,
    )


def _cost(delivery: Delivery, records: int) -> float:
    """Return USD per million records (prices are per million units)."""
    return (delivery.write_units * WRITE_PRICE + delivery.read_units * READ_PRICE) / records


def _ops(delivery: Delivery) -> str:
    return ", ".join(f"{count} {name}" for name, count in sorted(delivery.operations.items()))


def report(
    results: list[Result],
    answers: dict[str, dict[str, list[str]]],
    floor: dict[str, float],
    args: Any,
) -> str:
    """Return the results as Markdown tables."""
    lines = [
        f"Batches of {args.records} records, {args.latency_ms:g} ms added to every DynamoDB "
        f"request, {args.work_ms:g} ms of handler work, median of {args.runs} runs.",
        "",
        "| batch | delivery | Powertools | ours | ours / Powertools | target | ours / server "
        "floor | requests (Powertools; ours) |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    cost_lines = [
        "| batch | delivery | Powertools WRU + RRU | ours WRU + RRU | Powertools $/M records "
        "| ours $/M records |",
        "|---|---|---:|---:|---:|---:|",
    ]
    verdicts = []
    for kind in KINDS:
        theirs = next(r for r in results if r.kind == kind and r.variant == "powertools")
        ours = next(r for r in results if r.kind == kind and r.variant == "ours")
        for label, target, pick in (
            ("first", 0.2, lambda r: r.first),  # labels are server_floor's keys
            ("redelivery", 0.05, lambda r: r.again),
        ):
            t, o = _median(pick(theirs)), _median(pick(ours))
            ratio = o.wall_s / t.wall_s
            verdicts.append(ratio <= target)
            lines.append(
                f"| {kind} | {label} | {t.wall_s * 1000:.0f} ms | {o.wall_s * 1000:.0f} ms | "
                f"{ratio:.3f}x | <= {target}x {'met' if ratio <= target else 'NOT met'} | "
                f"{o.wall_s / floor[label]:.2f}x | {_ops(t)}; {_ops(o)} |"
            )
            cost_lines.append(
                f"| {kind} | {label} | {t.write_units} + {t.read_units} | "
                f"{o.write_units} + {o.read_units} | {_cost(t, args.records):.3f} | "
                f"{_cost(o, args.records):.3f} |"
            )
    same = [
        f"{kind}: {'same' if same_answer(kind, answers[kind]) else 'DIFFERENT'} "
        f"(Powertools reports {len(answers[kind]['powertools'])}, ours "
        f"{len(answers[kind]['ours'])})"
        for kind in KINDS
    ]
    return "\n".join(
        [
            *lines,
            "",
            "Request units (WRU: write, RRU: read) per batch of "
            f"{args.records}, and on-demand cost per million records "
            f"(${WRITE_PRICE}/M WRU, ${READ_PRICE}/M RRU):",
            "",
            *cost_lines,
            "",
            f"Server floor (no library): {2 * args.records} conditional PutItems from 16 threads "
            f"{floor['first'] * 1000:.0f} ms; one BatchGetItem of {args.records} keys "
            f"{floor['redelivery'] * 1000:.0f} ms.",
            "",
            "Partial-batch answers with every tenth record failing: " + "; ".join(same),
            f"All targets met: {'yes' if all(verdicts) else 'NO'}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the report; exit 1 when a run misbehaved."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--latency-ms", type=float, default=5.0)
    parser.add_argument("--work-ms", type=float, default=0.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--in-process", action="store_true", help="run moto in this process")
    parser.add_argument("--json", help="also write every delivery, with the run's facts, here")
    args = parser.parse_args(argv)
    os.environ.pop("POWERTOOLS_IDEMPOTENCY_DISABLED", None)
    os.environ.pop("IDEMPOTENCY_DISABLED", None)
    os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
    try:
        with moto_endpoint(args.in_process) as endpoint:
            results = run_all(endpoint, args)
            answers = {kind: failure_answers(kind, endpoint, args.records) for kind in KINDS}
            floor = server_floor(
                endpoint, records=args.records, latency_ms=args.latency_ms, runs=args.runs
            )
    except BenchmarkError as exc:
        print(f"benchmark aborted: {exc}", file=sys.stderr)
        return 1
    print(report(results, answers, floor, args))
    if args.json:
        run = results_json.run_info(command_line("benchmarks.bench_batches"), None)
        results_json.write(args.json, {"run": run, "results": [asdict(r) for r in results]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
