"""The outbox publisher's events per second, before and after a change, side by side on moto.

One moto server; each measurement is a child process that imports ``idempotent_lambda`` from
the tree it is given (``PYTHONPATH``): it emits N events through an ``@idempotent`` handler,
reads them from the table's stream with GetRecords, and times ``publish_handler`` over them in
Lambda-sized batches (100 records) to EventBridge. Trees alternate, round after round, so the
load of a shared machine falls on both alike; the median of each is reported, with the ratio.
Besides events per second (moto's time included), the child reports the CPU time of its own
process per event: the publisher's work alone, moto running in the parent.

"Before" is a checkout of an earlier commit, e.g.
``git worktree add /tmp/outbox-before bf4da40``.

Run: ``python -m benchmarks.bench_outbox_publisher --before /tmp/outbox-before``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def child(endpoint: str, events: int) -> None:
    """Measure one tree (the one on ``PYTHONPATH``): print its events per second as JSON."""
    import io
    import time
    import uuid

    import boto3

    import idempotent_lambda
    from idempotent_lambda import IdempotencyConfig, idempotent
    from idempotent_lambda.metrics import EMFMetrics
    from idempotent_lambda.outbox import emit, publish_handler
    from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
    from idempotent_lambda.persistence.dynamodb._operator import create_idempotency_table

    def client(service: str) -> Any:
        return boto3.client(
            service,
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    ddb, streams = client("dynamodb"), client("dynamodbstreams")
    table = f"pub-{uuid.uuid4().hex[:8]}"
    create_idempotency_table(ddb, table_name=table)
    ddb.update_table(
        TableName=table, StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"}
    )
    stream_arn = ddb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    store = DynamoDBPersistenceLayer(table, boto3_client=ddb)

    @idempotent(persistence_store=store, config=IdempotencyConfig(event_key_jmespath="order_id"))
    def create(event: dict[str, Any], context: Any) -> str:
        return emit("OrderCreated", {"order_id": event["order_id"]}, source="bench.orders")

    for n in range(events):
        create({"order_id": f"o-{n}"}, None)
    records: list[dict[str, Any]] = []
    for shard in streams.describe_stream(StreamArn=stream_arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(
            StreamArn=stream_arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            page = streams.get_records(ShardIterator=iterator)
            for record in page["Records"]:
                change = dict(record["dynamodb"])
                change["ApproximateCreationDateTime"] = int(
                    change["ApproximateCreationDateTime"].timestamp()
                )
                if "outbox_id" in change.get("NewImage", {}):
                    records.append({**record, "dynamodb": change, "eventSourceARN": stream_arn})
            iterator = page.get("NextShardIterator") if page["Records"] else None
    publish = publish_handler(
        store, events_client=client("events"), metrics=EMFMetrics("b", stream=io.StringIO())
    )
    started, cpu = time.perf_counter(), time.process_time()
    for start in range(0, len(records), 100):
        answer = publish({"Records": records[start : start + 100]}, None)
        assert not answer["batchItemFailures"], answer
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    ddb.delete_table(TableName=table)
    print(
        json.dumps(
            {
                "tree": str(Path(idempotent_lambda.__file__).parents[1]),
                "events": len(records),
                "events_per_s": len(records) / elapsed,
                "cpu_ms_per_event": cpu * 1000 / len(records),
            }
        )
    )


def measure(tree: Path, endpoint: str, events: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, __file__, "--child", endpoint, "--events", str(events)],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        cwd="/",
    )
    if done.returncode:
        raise SystemExit(f"the child for {tree} failed:\n{done.stderr}")
    out = done.stdout
    found: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    assert Path(found["tree"]) == tree, (found["tree"], tree)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="the earlier checkout (required)")
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", metavar="ENDPOINT")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.events)
        return
    if args.before is None:
        parser.error("--before is required")
    from idempotent_lambda.testing import local_dynamodb

    trees = {"before": args.before.resolve(), "after": ROOT}
    rates: dict[str, list[float]] = {name: [] for name in trees}
    cpu: dict[str, list[float]] = {name: [] for name in trees}
    with local_dynamodb() as endpoint:
        for round_ in range(args.rounds):
            for name, tree in trees.items():
                found = measure(tree, endpoint, args.events)
                rates[name].append(found["events_per_s"])
                cpu[name].append(found["cpu_ms_per_event"])
                print(
                    f"round {round_ + 1} {name:<6} {found['events_per_s']:7.1f} events/s, "
                    f"{found['cpu_ms_per_event']:.3f} ms of the publisher's CPU per event",
                    flush=True,
                )
    before, after = (statistics.median(rates[name]) for name in trees)
    cpu_before, cpu_after = (statistics.median(cpu[name]) for name in trees)
    print(
        f"median: before {before:.1f} events/s, after {after:.1f} events/s, "
        f"after/before {after / before:.2f} ({args.events} events a round, batches of 100); "
        f"publisher CPU per event: before {cpu_before:.3f} ms, after {cpu_after:.3f} ms, "
        f"after/before {cpu_after / cpu_before:.2f}"
    )


if __name__ == "__main__":
    main()
