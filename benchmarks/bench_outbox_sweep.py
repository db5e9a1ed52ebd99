"""What one run of the outbox sweeper costs, by the number of items in the table.

The table holds N items (idempotency records and published outbox items, the steady state)
plus 10 unpublished outbox items older than the sweeper's minimum age, the ones a lost stream
left behind. One sweeper run (``key_prefixes=["orders"]``, ``limit=100``) is measured: the
requests it sends (counted by a botocore hook on the real client) and the read units they
cost. moto's ``ConsumedCapacity`` answers are fixed numbers, not DynamoDB's, so read units are
computed with DynamoDB's rules from the sizes of what each request really read: a ``Query`` of
an index, eventually consistent, 0.5 RCU per 4 KB of entries read (rounded up per request); the
consistent ``BatchGetItem``, 1 RCU per item of up to 4 KB. For comparison, the same figures for
the operators' full ``Scan`` (``outbox list``), which reads the whole table.

Items are loaded with ``BatchWriteItem`` (25 a request), after the unpublished events are
emitted (moto copies the whole table for each transaction, so emitting into a large table times
out). 100,000 items take many minutes on a shared machine; ``--max-items`` and ``--min-items``
choose the tables loaded. moto reads an index by walking the whole table, so its times grow
with the table; DynamoDB's read units do not, and those are what is computed here.

Run: ``python -m benchmarks.bench_outbox_sweep [--max-items 100000]``.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import time
import uuid
from typing import Any

import boto3

from benchmarks.bench_outbox_write_units import item_size
from idempotent_lambda import IdempotencyConfig, idempotent
from idempotent_lambda.metrics import EMFMetrics
from idempotent_lambda.outbox import emit, sweep_handler
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.persistence.dynamodb._operator import create_idempotency_table
from idempotent_lambda.testing import ManualClock, local_dynamodb

UNPUBLISHED = 10


def _client(service: str, endpoint: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def _load(ddb: Any, table: str, count: int) -> None:
    """Write ``count`` steady-state items: records and published outbox items, half each."""
    now = int(time.time())
    for start in range(0, count, 25):
        requests = []
        for n in range(start, min(start + 25, count)):
            key = f"orders#{uuid.uuid4().hex}{uuid.uuid4().hex}"
            item: dict[str, Any] = {
                "id": {"S": key},
                "expiration": {"N": str(now + 3600)},
                "status": {"S": "COMPLETED"},
                "data": {"S": json.dumps({"order_id": f"o-{n}", "state": "created"})},
            }
            if n % 2:
                item = {
                    "id": {"S": f"{key}#outbox#{uuid.uuid4()}"},
                    "outbox_id": {"S": str(uuid.uuid4())},
                    "outbox_detail_type": {"S": "OrderCreated"},
                    "outbox_detail": {"S": json.dumps({"order_id": f"o-{n}"})},
                    "outbox_source": {"S": "shop.orders"},
                    "outbox_emitted_at": {"N": str(now * 1000)},
                    "outbox_published_at": {"N": str(now * 1000 + 50)},
                    "expiration": {"N": str(now + 90000)},
                }
            requests.append({"PutRequest": {"Item": item}})
        pending: Any = {table: requests}
        while pending:
            pending = ddb.batch_write_item(RequestItems=pending).get("UnprocessedItems")


class _Reads:
    """Count requests and sum what each read, by DynamoDB's read-unit rules."""

    def __init__(self, ddb: Any) -> None:
        self.requests: dict[str, int] = {}
        self.rcu = 0.0
        ddb.meta.events.register("after-call.dynamodb", self._after)

    def _after(self, http_response: Any, parsed: Any, model: Any, **_: Any) -> None:
        name = model.name
        self.requests[name] = self.requests.get(name, 0) + 1
        if name in ("Query", "Scan"):
            size = sum(item_size(i) for i in parsed.get("Items", []))
            self.rcu += max(0.5, math.ceil(size / 4096) * 0.5)
        elif name == "BatchGetItem":
            for items in parsed.get("Responses", {}).values():
                self.rcu += sum(max(1, math.ceil(item_size(i) / 4096)) for i in items)


def measure(endpoint: str, count: int) -> dict[str, Any]:
    """Load a table of ``count`` items plus the unpublished ones; measure one sweep and a Scan."""
    ddb = _client("dynamodb", endpoint)
    table = f"sweep-{uuid.uuid4().hex[:8]}"
    create_idempotency_table(ddb, table_name=table, outbox=True)
    clock = ManualClock()
    store = DynamoDBPersistenceLayer(table, boto3_client=ddb, clock=clock)

    @idempotent(
        persistence_store=store,
        config=IdempotencyConfig(event_key_jmespath="order_id"),
        key_prefix="orders",
    )
    def create(event: dict[str, Any], context: Any) -> str:
        return emit("OrderCreated", {"order_id": event["order_id"]}, source="shop.orders")

    for n in range(UNPUBLISHED):  # before the load: moto copies a table per transaction
        create({"order_id": f"lost-{n}"}, None)
    started = time.monotonic()
    _load(ddb, table, count)
    loaded_s = time.monotonic() - started
    clock.advance(301)
    events = _client("events", endpoint)
    sweep = sweep_handler(
        store,
        events_client=events,
        metrics=EMFMetrics("bench", stream=io.StringIO()),
        key_prefixes=["orders"],
    )
    reads = _Reads(ddb)
    started = time.monotonic()
    answer = sweep(None, None)
    sweep_s = time.monotonic() - started
    sweep_reads = (dict(reads.requests), reads.rcu)
    reads.requests.clear()
    reads.rcu = 0.0
    scan = _Reads(_client("dynamodb", endpoint))
    pages: Any = {"TableName": table}
    while True:
        page = scan_client_scan(scan, endpoint, pages)
        if not page.get("LastEvaluatedKey"):
            break
        pages["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    ddb.delete_table(TableName=table)
    return {
        "items": count,
        "loaded_s": loaded_s,
        "sweep": answer,
        "sweep_requests": sweep_reads[0],
        "sweep_rcu": sweep_reads[1],
        "sweep_s": sweep_s,
        "scan_requests": scan.requests.get("Scan", 0),
        "scan_rcu": scan.rcu,
    }


_SCAN_CLIENTS: dict[int, Any] = {}


def scan_client_scan(reads: _Reads, endpoint: str, request: dict[str, Any]) -> Any:
    """One page of the full-table Scan, through a client whose reads ``reads`` counts."""
    client = _SCAN_CLIENTS.get(id(reads))
    if client is None:
        client = _SCAN_CLIENTS[id(reads)] = _client("dynamodb", endpoint)
        client.meta.events.register("after-call.dynamodb", reads._after)
    return client.scan(**request)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-items", type=int, default=100_000)
    parser.add_argument("--min-items", type=int, default=0)
    args = parser.parse_args()
    logging.getLogger("idempotent_lambda.outbox").setLevel(logging.ERROR)  # its sweep notice
    sizes = [n for n in (0, 1_000, 10_000, 100_000) if args.min_items <= n <= args.max_items]
    print(
        f"{'items':>8} {'load s':>7} | sweeper: {'requests':<40} {'RCU':>5} {'s':>5} "
        f"published | full Scan: {'requests':>8} {'RCU':>8}"
    )
    with local_dynamodb() as endpoint:
        for count in sizes:
            row = measure(endpoint, count)
            requests = ", ".join(f"{k} {v}" for k, v in sorted(row["sweep_requests"].items()))
            print(
                f"{row['items']:>8} {row['loaded_s']:>7.1f} | {requests:<49} "
                f"{row['sweep_rcu']:>5.1f} {row['sweep_s']:>5.2f} "
                f"{row['sweep']['due'] - row['sweep']['failed']:>9} | "
                f"{row['scan_requests']:>18} {row['scan_rcu']:>8.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
