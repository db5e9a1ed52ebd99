"""Worker processes for `test_redis_store` and `test_redis_orphan_lock`: one invocation each.

Kept apart from the test module so a spawned child imports only this, redis-py and the library.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any


def count_execution(executions_file: str) -> None:
    """Append this process's id to ``executions_file`` (one ``O_APPEND`` write: atomic)."""
    fd = os.open(executions_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{os.getpid()}\n".encode())
    finally:
        os.close(fd)


def invoke(port: int, executions_file: str, ready: Any, start: Any, results: Any) -> None:
    """Signal ``ready``, wait for ``start``, call the idempotent handler once, report the outcome.

    Each execution of the body appends one line to ``executions_file`` (`count_execution`), so
    the parent can count executions across processes.
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
        count_execution(executions_file)
        time.sleep(1.0)  # the work: the other processes arrive meanwhile
        return {"order_id": event["order_id"], "token": uuid.uuid4().hex}

    client.ping()  # connect before the race
    ready.release()
    start.wait(60)
    try:
        results.put(("result", handler({"order_id": 1}, FakeLambdaContext(30_000))))
    except Exception as exc:
        results.put(("error", type(exc).__name__))


def take_over(
    port: int, library: str, others: int, executions_file: str, ready: Any, start: Any, refused: Any
) -> None:
    """One invocation of ``library`` ("ours" or "powertools") on an abandoned record.

    `test_redis_orphan_lock` left a Powertools record whose lease has passed at the key
    ``orphan#<digest of {"id": "o-1"}>``. A body that runs appends a line to ``executions_file``
    and waits until the ``others`` processes were refused (each releases ``refused``), so none
    can replay instead.
    """
    import redis
    from aws_lambda_powertools.utilities import idempotency as pt
    from aws_lambda_powertools.utilities.idempotency import exceptions as pt_errors
    from aws_lambda_powertools.utilities.idempotency.persistence.redis import (
        RedisCachePersistenceLayer as PowertoolsRedis,
    )

    from idempotent_lambda import IdempotencyAlreadyInProgressError, IdempotencyConfig, idempotent
    from idempotent_lambda.persistence.redis import RedisCachePersistenceLayer
    from idempotent_lambda.testing import FakeLambdaContext

    client = redis.Redis(host="127.0.0.1", port=port)

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        count_execution(executions_file)
        for _ in range(others):
            assert refused.acquire(timeout=60)
        return {"order": event["id"]}

    if library == "ours":
        store = RedisCachePersistenceLayer(client=client)
        config = IdempotencyConfig(record_format="powertools")
        decorated = idempotent(persistence_store=store, config=config, key_prefix="orphan")(handler)
    else:
        theirs = PowertoolsRedis(client=client)
        decorated = pt.idempotent(persistence_store=theirs, key_prefix="orphan")(handler)
    client.ping()  # connect before the race
    ready.release()
    start.wait(60)
    try:
        decorated({"id": "o-1"}, FakeLambdaContext(300_000))
    except (
        IdempotencyAlreadyInProgressError,
        pt_errors.IdempotencyAlreadyInProgressError,
        pt_errors.IdempotencyInconsistentStateError,  # see REFUSED in test_redis_orphan_lock
    ):
        refused.release()
