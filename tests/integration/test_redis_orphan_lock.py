"""Powertools' orphan lock on Redis: a mixed fleet takes an abandoned record over only once.

Before Powertools overwrites an expired or abandoned record it takes ``{key}:lock`` with
``SET NX``. With ``record_format="powertools"`` our claim takes the same lock first, so whichever
library gets the lock takes the record over and the other reports the key in progress. Every
test runs real Powertools and this library against the same redis-server; the abandoned record
is written with a lease that ended a minute ago, so no test waits for time to pass.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from idempotent_lambda import IdempotencyAlreadyInProgressError, IdempotencyConfig, idempotent
from idempotent_lambda.persistence.redis import RedisCachePersistenceLayer
from idempotent_lambda.record import IdempotencyRecord, Status
from idempotent_lambda.testing import FakeLambdaContext
from tests.integration import _redis_worker
from tests.integration._redis_server import requests_seen_by_server
from tests.integration._two_libraries import WAIT_S, Body, Crash

pt = pytest.importorskip("aws_lambda_powertools.utilities.idempotency")
from aws_lambda_powertools.utilities.idempotency import exceptions as pt_errors  # noqa: E402
from aws_lambda_powertools.utilities.idempotency.persistence.redis import (  # noqa: E402
    RedisCachePersistenceLayer as PowertoolsRedis,
)

EVENT = {"id": "o-1"}
# A Powertools loser that reads the abandoned record while the winner still holds only the lock
# calls it inconsistent; like the in-progress errors, the loser did not run the body.
REFUSED = (
    IdempotencyAlreadyInProgressError,
    pt_errors.IdempotencyAlreadyInProgressError,
    pt_errors.IdempotencyInconsistentStateError,
)


class HookedRedis(redis.Redis):
    """A client for Powertools that runs a hook once, at one step of its takeover.

    ``after_get`` runs after its first ``GET`` (it has just read the abandoned record);
    ``before_overwrite`` before its first plain ``SET`` (it holds the lock and is about to
    overwrite the record).
    """

    def __init__(self, port: int) -> None:
        super().__init__(host="127.0.0.1", port=port)
        self.after_get: Callable[[], None] | None = None
        self.before_overwrite: Callable[[], None] | None = None

    def get(self, name: Any) -> Any:
        value = super().get(name)
        hook, self.after_get = self.after_get, None
        if hook is not None:
            hook()
        return value

    def set(self, name: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("nx") and self.before_overwrite is not None:
            hook, self.before_overwrite = self.before_overwrite, None
            hook()
        return super().set(name, value, *args, **kwargs)


def context() -> FakeLambdaContext:
    """A lease no stall of a loaded machine outlasts: records abandon only when a test says so."""
    return FakeLambdaContext(timeout_ms=300_000)


def theirs(body: Body, client: redis.Redis) -> Callable[..., Any]:
    store = PowertoolsRedis(client=client)
    return pt.idempotent(persistence_store=store, config=pt.IdempotencyConfig())(body.handler)


def ours(body: Body, port: int) -> Callable[..., Any]:
    store = RedisCachePersistenceLayer(client=redis.Redis(host="127.0.0.1", port=port))
    config = IdempotencyConfig(record_format="powertools")
    return idempotent(persistence_store=store, config=config)(body.handler)


def abandoned_record(port: int, client: redis.Redis, key_prefix: str | None = None) -> str:
    """Leave a Powertools IN_PROGRESS record whose lease ended a minute ago; return its key."""
    body = Body()
    body.crash = True
    store = PowertoolsRedis(client=redis.Redis(host="127.0.0.1", port=port))
    crashing = pt.idempotent(persistence_store=store, key_prefix=key_prefix)(body.handler)
    with pytest.raises(Crash):
        crashing(EVENT, context())
    (key,) = client.keys("*")
    item = json.loads(client.get(key) or b"")
    item["in_progress_expiration"] = time.time_ns() // 1_000_000 - 60_000
    client.set(key, json.dumps(item), keepttl=True)
    client.delete(key + b":lock")  # none yet: the crashed call claimed a free key
    return str(key.decode())


def test_we_do_not_take_over_while_powertools_holds_the_orphan_lock(
    redis_port: int, redis_client: redis.Redis
) -> None:
    """Powertools has taken the lock and not yet overwritten the record: we report in progress."""
    key = abandoned_record(redis_port, redis_client)
    body = Body()
    powertools_client = HookedRedis(redis_port)
    refused: list[BaseException] = []

    def our_call_meanwhile() -> None:
        assert redis_client.exists(f"{key}:lock")
        redis_client.expire(f"{key}:lock", 600)  # Powertools' 10 s must not pass during a stall
        with pytest.raises(IdempotencyAlreadyInProgressError) as caught:
            ours(body, redis_port)(EVENT, context())
        refused.append(caught.value)

    powertools_client.before_overwrite = our_call_meanwhile
    result = theirs(body, powertools_client)(EVENT, context())

    assert (1, 1) == (body.calls, len(refused))
    assert result == ours(body, redis_port)(EVENT, context())  # Powertools' result, replayed


def test_powertools_backs_off_once_we_took_the_record_over(
    redis_port: int, redis_client: redis.Redis
) -> None:
    """Powertools read the abandoned record, then we took it over: its lock attempt fails."""
    abandoned_record(redis_port, redis_client)
    body = Body()
    body.go.clear()
    powertools_client = HookedRedis(redis_port)
    results: list[Any] = []
    running = threading.Thread(target=lambda: results.append(ours(body, redis_port)(EVENT, {})))

    def we_take_over_meanwhile() -> None:
        running.start()
        assert body.entered.wait(WAIT_S)  # our claim is written and our body runs

    powertools_client.after_get = we_take_over_meanwhile
    try:
        with pytest.raises(pt_errors.IdempotencyAlreadyInProgressError):
            theirs(body, powertools_client)(EVENT, context())
    finally:
        body.go.set()
        running.join(WAIT_S)

    assert 1 == body.calls
    assert [{"order": "o-1", "run": 1}] == results


def test_both_libraries_racing_on_an_abandoned_record_run_the_body_once(
    redis_port: int, redis_client: redis.Redis
) -> None:
    """Three invocations of each library, released together: one body run, five refusals."""
    for _ in range(5):
        redis_client.flushdb()
        abandoned_record(redis_port, redis_client)

        assert (1, 5) == race(redis_port, instances=3)


def race(port: int, *, instances: int) -> tuple[int, int]:
    """Start ``instances`` invocations of each library together; return (body runs, refusals)."""
    body = Body()
    handlers = [theirs(body, redis.Redis(host="127.0.0.1", port=port)) for _ in range(instances)]
    handlers += [ours(body, port) for _ in range(instances)]
    start = threading.Barrier(len(handlers))
    refused: list[BaseException] = []
    losers_done = threading.Semaphore(0)
    body.go.clear()

    def invoke(handler: Callable[..., Any]) -> None:
        start.wait(WAIT_S)
        try:
            handler(EVENT, context())
        except REFUSED as exc:
            refused.append(exc)
            losers_done.release()

    threads = [threading.Thread(target=invoke, args=(h,)) for h in handlers]
    for thread in threads:
        thread.start()
    try:
        for _ in range(len(handlers) - 1):  # the winner's body waits until every loser is out
            assert losers_done.acquire(timeout=WAIT_S)
    finally:
        body.go.set()
        for thread in threads:
            thread.join(WAIT_S)
    return body.calls, len(refused)


def test_processes_of_both_libraries_take_an_abandoned_record_over_once(
    redis_port: int, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Two processes of each library race on one abandoned record: one body run in all.

    Separate interpreters and connections, as in a real fleet. Free timing rarely lands in the
    narrow window the orphan lock closes (a Powertools read of the record before our takeover,
    its lock attempt after it); the thread tests above force that interleaving.
    """
    abandoned_record(redis_port, redis_client, key_prefix="orphan")
    spawn = multiprocessing.get_context("spawn")
    executions = tmp_path / "executions"
    ready, start, refused = spawn.Semaphore(0), spawn.Event(), spawn.Semaphore(0)
    libraries = ["ours", "powertools"] * 2
    processes = [
        spawn.Process(
            target=_redis_worker.take_over,
            args=(redis_port, library, len(libraries) - 1, str(executions), ready, start, refused),
        )
        for library in libraries
    ]
    for process in processes:
        process.start()
    for _ in processes:
        assert ready.acquire(timeout=120)
    start.set()
    for process in processes:
        process.join(120)

    assert [0] * len(libraries) == [process.exitcode for process in processes]
    assert 1 == len(executions.read_text().splitlines())


def test_claims_on_free_and_live_keys_stay_one_round_trip(
    redis_port: int, redis_client: redis.Redis
) -> None:
    """Only the takeover of an abandoned record pays for the lock: EVAL, SET NX, EVAL."""
    store = RedisCachePersistenceLayer(client=redis_client).with_record_format("powertools")
    now_ms = time.time_ns() // 1_000_000
    window = {"now_ms": now_ms, "lease_cutoff_ms": now_ms}

    def claim(owner: str, lease_end_ms: int) -> bool:
        record = IdempotencyRecord(
            "k#1", Status.IN_PROGRESS, now_ms // 1000 + 3600, lease_end_ms, owner=owner
        )
        return store.claim(record, **window).claimed

    with requests_seen_by_server(redis_port) as free:
        assert claim("a", now_ms - 1)  # its lease has already passed: abandoned at once
    with requests_seen_by_server(redis_port) as abandoned:
        assert claim("b", now_ms + 60_000)
    with requests_seen_by_server(redis_port) as live:
        assert not claim("c", now_ms + 60_000)

    assert (["EVAL"], ["EVAL", "SET", "EVAL"], ["EVAL"]) == (free, abandoned, live)
    assert 0 < redis_client.ttl("k#1:lock") <= 10


def test_the_native_layout_takes_no_lock(redis_client: redis.Redis) -> None:
    """Powertools cannot read the native hash layout, so its takeovers write no lock key."""
    store = RedisCachePersistenceLayer(client=redis_client)
    now_ms = time.time_ns() // 1_000_000
    for owner, lease_end_ms in [("a", now_ms - 1), ("b", now_ms + 60_000)]:
        record = IdempotencyRecord(
            "k#1", Status.IN_PROGRESS, now_ms // 1000 + 3600, lease_end_ms, owner=owner
        )
        assert store.claim(record, now_ms=now_ms, lease_cutoff_ms=now_ms).claimed

    assert [b"k#1"] == redis_client.keys("*")
