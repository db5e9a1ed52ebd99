"""Write units per event with and without the outbox, computed from the items really sent.

moto's server answers ``ReturnConsumedCapacity`` with fixed numbers for single writes and with
nothing for ``TransactWriteItems``, so its answers cannot be used. Instead every write request
the real handlers send to moto is captured (a botocore ``provide-client-params`` hook: the items
as sent), and each item's size is computed with DynamoDB's documented rules (attribute name
bytes plus value bytes; a number is 1 byte plus 1 per two significant digits). Units:

- ``PutItem``: ceil(size / 1 KB) WCU; inside ``TransactWriteItems`` twice that;
- ``UpdateItem`` (the publisher's mark): ceil(larger of the item before and after / 1 KB);
- the publisher's consistent ``BatchGetItem``: ceil(size / 4 KB) RCU per item.

Scenarios, one ``create_order`` request each (the sample app's shape: an order item written with
the record, a result of ~60 bytes), with 0, 1 and 5 events of ~80-byte detail:

- ``direct``: no outbox; the handler would call PutEvents itself (no table writes for events);
- ``outbox``: ``emit`` per event, published by ``publish_handler``.

Run: ``python -m benchmarks.bench_outbox_write_units``.
"""

from __future__ import annotations

import math
import os
from decimal import Decimal
from typing import Any

import boto3

from idempotent_lambda import IdempotencyConfig, idempotent
from idempotent_lambda.outbox import emit, publish_handler
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.persistence.dynamodb._operator import create_idempotency_table
from idempotent_lambda.testing import local_dynamodb
from idempotent_lambda.transaction import current_transaction


def item_size(item: dict[str, Any]) -> int:
    """Return an item's size in bytes as DynamoDB bills it (low-level form)."""
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


def _value_size(value: dict[str, Any]) -> int:
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(inner.encode())
    if kind == "N":
        digits = Decimal(inner).normalize().as_tuple().digits
        return 1 + math.ceil(len(digits) / 2)
    if kind == "B":
        return len(inner)
    if kind in {"BOOL", "NULL"}:
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + _value_size(v) for k, v in inner.items())
    if kind == "L":
        return 3 + sum(_value_size(v) for v in inner)
    raise ValueError(kind)


class Meter:
    """Sum the write and read units of the requests one client sends."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.wcu = 0
        self.rcu = 0.0
        self.requests: list[str] = []
        client.meta.events.register("provide-client-params.dynamodb.*", self._seen)

    def _seen(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        operation = model.name
        self.requests.append(operation)
        if operation == "PutItem":
            self.wcu += math.ceil(item_size(params["Item"]) / 1024)
        elif operation == "TransactWriteItems":
            for write in params["TransactItems"]:
                if "Put" in write:
                    self.wcu += 2 * math.ceil(item_size(write["Put"]["Item"]) / 1024)
        elif operation == "UpdateItem":
            before = self.client.get_item(TableName=params["TableName"], Key=params["Key"])
            size = item_size(before.get("Item", {})) + 64  # the mark adds < 64 bytes
            self.wcu += math.ceil(size / 1024)
        elif operation == "BatchGetItem":
            for table, ask in params["RequestItems"].items():
                for key in ask["Keys"]:
                    item = self.client.get_item(TableName=table, Key=key).get("Item", {})
                    self.rcu += math.ceil(item_size(item) / 4096)


def run(endpoint: str, events: int, *, outbox: bool, order: bool = True) -> tuple[int, float, int]:
    """Return (WCU, RCU, PutEvents requests) of one request with ``events`` events."""
    session = boto3.session.Session()
    plain = session.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")
    table = f"units-{events}-{int(outbox)}-{int(order)}-{os.getpid()}"
    create_idempotency_table(plain, table_name=table)
    client = session.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")
    meter = Meter(client)
    store = DynamoDBPersistenceLayer(table, boto3_client=client)

    @idempotent(persistence_store=store, config=IdempotencyConfig(event_key_jmespath="order_id"))
    def create_order(event: dict[str, Any], context: Any) -> dict[str, Any]:
        order_id = event["order_id"]
        if order:
            current_transaction().put(
                table, {"id": f"order#{order_id}", "total": Decimal("42.50"), "state": "created"}
            )
        for n in range(events if outbox else 0):
            emit(
                "OrderCreated",
                {"order_id": order_id, "line": n, "total": "42.50", "currency": "EUR"},
                source="shop.orders",
            )
        return {"order_id": order_id, "status": "created"}

    create_order({"order_id": "o-12345678"}, None)
    put_events = 0
    if outbox and events:
        bus = session.client("events", endpoint_url=endpoint, region_name="us-east-1")
        calls: list[int] = []
        bus.meta.events.register(
            "provide-client-params.events.PutEvents",
            lambda params, **_: calls.append(len(params["Entries"])),
        )
        items = plain.scan(TableName=table)["Items"]
        keys = [i["id"] for i in items if i["id"]["S"].startswith("outbox#")]
        batch = {
            "Records": [
                {
                    "eventID": str(n),
                    "eventName": "INSERT",
                    "eventSourceARN": f"arn:aws:dynamodb:us-east-1:1:table/{table}/stream/x",
                    "dynamodb": {"Keys": {"id": key}, "SequenceNumber": str(n + 1)},
                }
                for n, key in enumerate(keys)
            ]
        }
        publish = publish_handler(store, events_client=bus, metrics=_Quiet())
        if publish(batch, None)["batchItemFailures"]:
            raise RuntimeError("the publisher failed")
        put_events = len(calls)
    return meter.wcu, meter.rcu, put_events


class _Quiet:
    def put(self, metrics: Any) -> None:
        """Drop the publisher's metrics (not measured here)."""


def main() -> None:
    """Print the units of each scenario and the difference per event."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    with local_dynamodb() as endpoint:
        print("order write  events  direct WCU  outbox WCU  outbox RCU  PutEvents  extra WCU/event")
        for order in (True, False):
            for events in (0, 1, 5, 10):
                direct, _, _ = run(endpoint, events, outbox=False, order=order)
                wcu, rcu, put_events = run(endpoint, events, outbox=True, order=order)
                per_event = (wcu - direct) / events if events else 0
                print(
                    f"{'yes' if order else 'no':>11}  {events:>6}  {direct:>10}  {wcu:>10}  "
                    f"{rcu:>10.0f}  {put_events:>9}  {per_event:>15.1f}"
                )


if __name__ == "__main__":
    main()
