"""A worker process for `test_transaction_dynamodb`: one invocation that kills itself on cue.

Usage: ``python _transaction_worker.py ENDPOINT TABLE ORDERS_TABLE KILL_POINT LEASE_MS``.

The worker runs one idempotent handler that queues an order ``Put`` on the transaction and
SIGKILLs its own process at ``KILL_POINT``:

- ``before_body``: the claim is written, the body has not started;
- ``after_queue``: inside the body, right after the write was queued;
- ``before_commit``: the ``TransactWriteItems`` request is built but not sent;
- ``in_flight``: the request is on its way (a timer kills the process a moment after sending;
  used against an external server, where whether the request got out is left open);
- ``in_flight_server``: the same, but the in-process test server kills the worker once the
  whole request has arrived, so the outcome does not depend on the machine's load;
- ``after_commit``: the transaction's answer has arrived, before the handler returns;
- ``none``: no kill; the worker prints the result.

Nothing but SIGKILL stops it: no ``finally``, no ``atexit``, no release.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

ORDER_ID = "order-7"


def die() -> None:
    """Stop this process the hard way, as Lambda's sandbox being torn down would."""
    os.kill(os.getpid(), signal.SIGKILL)


def main(endpoint: str, table: str, orders_table: str, kill_point: str, lease_ms: int) -> None:
    """Run the handler once, dying at ``kill_point``."""
    import boto3

    from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent
    from idempotent_lambda.testing import FakeLambdaContext
    from idempotent_lambda.transaction import current_transaction

    client = boto3.session.Session().client(
        "dynamodb", endpoint_url=endpoint, region_name="us-east-1"
    )
    if kill_point == "before_commit":
        client.meta.events.register("before-send.dynamodb.TransactWriteItems", lambda **_: die())
    elif kill_point == "in_flight":
        client.meta.events.register(
            "before-send.dynamodb.TransactWriteItems",
            lambda **_: threading.Timer(0.002, die).start(),
        )
    elif kill_point == "after_commit":
        client.meta.events.register("after-call.dynamodb.TransactWriteItems", lambda **_: die())
    store = DynamoDBPersistenceLayer(table, boto3_client=client)
    config = IdempotencyConfig(event_key_jmespath="order_id")

    @idempotent(persistence_store=store, config=config, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        if kill_point == "before_body":
            die()
        current_transaction().put(
            orders_table,
            {"pk": event["order_id"], "writer": f"worker-{os.getpid()}"},
            condition="attribute_not_exists(pk)",
        )
        if kill_point == "after_queue":
            die()
        return {"order_id": event["order_id"], "writer": f"worker-{os.getpid()}"}

    print(handler({"order_id": ORDER_ID}, FakeLambdaContext(lease_ms)), flush=True)


if __name__ == "__main__":
    endpoint, table, orders, point, lease = sys.argv[1:6]
    main(endpoint, table, orders, point, int(lease))
