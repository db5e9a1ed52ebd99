"""A worker process for `test_concurrency`: one Lambda-like invocation against a shared table.

Kept apart from the test module so a spawned child imports only this and the library.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any


def invoke(
    endpoint: str,
    table: str,
    executions_file: str,
    wait_seconds: float,
    ready: Any,
    start: Any,
    results: Any,
) -> None:
    """Signal ``ready``, wait for ``start``, call the idempotent handler once, report the outcome.

    Each execution of the body appends one line to ``executions_file`` (an ``O_APPEND`` write,
    atomic for a short line), so the parent can count executions across processes.
    """
    import boto3

    from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent
    from idempotent_lambda.testing import FakeLambdaContext

    client = boto3.session.Session().client(
        "dynamodb", endpoint_url=endpoint, region_name="us-east-1"
    )
    store = DynamoDBPersistenceLayer(table, boto3_client=client)
    config = IdempotencyConfig(
        event_key_jmespath="order_id", wait_for_in_progress_seconds=wait_seconds
    )

    @idempotent(persistence_store=store, config=config, key_prefix="processes")
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        fd = os.open(executions_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{os.getpid()}\n".encode())
        finally:
            os.close(fd)
        time.sleep(1.0)  # the work: long enough for every other process to arrive meanwhile
        return {"order_id": event["order_id"], "token": uuid.uuid4().hex, "pid": os.getpid()}

    client.describe_table(TableName=table)  # warm the connection before the race
    ready.release()
    start.wait(60)
    try:
        results.put(("result", handler({"order_id": 1}, FakeLambdaContext(30_000))))
    except Exception as exc:
        results.put(("error", type(exc).__name__))
