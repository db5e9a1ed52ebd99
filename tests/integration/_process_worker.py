"""A worker process for `test_concurrency`: one Lambda-like invocation against a shared table.

Kept apart from the test module so a spawned child imports only this and the library.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

#: Bounds that only a hang exhausts (seconds), and each call's remaining time (its lease).
TIMEOUT_S = 120
CONTEXT_MS = 300_000


def invoke(
    endpoint: str,
    table: str,
    executions_file: str,
    wait_seconds: float,
    others: int,
    ready: Any,
    start: Any,
    arrived: Any,
    results: Any,
) -> None:
    """Signal ``ready``, wait for ``start``, call the idempotent handler once, report the outcome.

    Each execution of the body appends one line to ``executions_file`` (an ``O_APPEND`` write,
    atomic for a short line), so the parent can count executions across processes. A process
    whose call finds the key in progress releases ``arrived`` once: when it is refused, or when
    it first polls the record in wait mode. The body runs until the ``others`` have arrived, so
    every duplicate meets a call in progress, however late the machine's load makes it.
    """
    import boto3

    from idempotent_lambda import (
        DynamoDBPersistenceLayer,
        IdempotencyAlreadyInProgressError,
        IdempotencyConfig,
        idempotent,
    )
    from idempotent_lambda.persistence.base import store_for_format
    from idempotent_lambda.testing import FakeLambdaContext

    client = boto3.session.Session().client(
        "dynamodb", endpoint_url=endpoint, region_name="us-east-1"
    )
    store = DynamoDBPersistenceLayer(table, boto3_client=client)
    config = IdempotencyConfig(
        event_key_jmespath="order_id", wait_for_in_progress_seconds=wait_seconds
    )
    arrivals: list[bool] = []

    def arrive() -> None:
        if not arrivals:
            arrivals.append(True)
            arrived.release()

    store = store_for_format(store, config.record_format)  # the view the engine reads through
    read = store.get

    def get(idempotency_key: str) -> Any:
        arrive()
        return read(idempotency_key)

    store.get = get  # type: ignore[method-assign]

    @idempotent(persistence_store=store, config=config, key_prefix="processes")
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        fd = os.open(executions_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{os.getpid()}\n".encode())
        finally:
            os.close(fd)
        for _ in range(others):  # the work lasts until every other process met it in progress
            if not arrived.acquire(timeout=TIMEOUT_S):
                raise RuntimeError("the other processes never found the call in progress")
        return {"order_id": event["order_id"], "token": uuid.uuid4().hex, "pid": os.getpid()}

    client.describe_table(TableName=table)  # warm the connection before the race
    ready.release()
    start.wait(TIMEOUT_S)
    try:
        results.put(("result", handler({"order_id": 1}, FakeLambdaContext(CONTEXT_MS))))
    except IdempotencyAlreadyInProgressError as exc:
        arrive()
        results.put(("error", type(exc).__name__))
    except Exception as exc:
        results.put(("error", type(exc).__name__))
