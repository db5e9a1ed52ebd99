"""A worker process for `test_redis_store`: one Lambda-like invocation against redis-server.

Kept apart from the test module so a spawned child imports only this, redis-py and the library.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any


def invoke(port: int, executions_file: str, ready: Any, start: Any, results: Any) -> None:
    """Signal ``ready``, wait for ``start``, call the idempotent handler once, report the outcome.

    Each execution of the body appends one line to ``executions_file`` (an ``O_APPEND`` write,
    atomic for a short line), so the parent can count executions across processes.
    """
    import redis

    from idempotent_lambda import IdempotencyConfig, idempotent
    from idempotent_lambda.persistence.redis import RedisCachePersistenceLayer
    from idempotent_lambda.testing import FakeLambdaContext

    client = redis.Redis(host="127.0.0.1", port=port)
    store = RedisCachePersistenceLayer(client=client)

    @idempotent(
        persistence_store=store,
        config=IdempotencyConfig(event_key_jmespath="order_id"),
        key_prefix="processes",
    )
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        fd = os.open(executions_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{os.getpid()}\n".encode())
        finally:
            os.close(fd)
        time.sleep(1.0)  # the work: the other processes arrive meanwhile
        return {"order_id": event["order_id"], "token": uuid.uuid4().hex}

    client.ping()  # connect before the race
    ready.release()
    start.wait(60)
    try:
        results.put(("result", handler({"order_id": 1}, FakeLambdaContext(30_000))))
    except Exception as exc:
        results.put(("error", type(exc).__name__))
