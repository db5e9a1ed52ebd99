"""A duplicate that waits (``wait_for_in_progress_seconds``) behind Powertools' orphan lock.

In Powertools' layout a takeover of an abandoned record first takes ``{key}:lock``. A duplicate
that meets the lock sees a record that still looks abandoned, yet may not take it over: the
lock's holder is live until the lock ends. It must wait like any duplicate (the holder's result,
or `IdempotencyAlreadyInProgressError` once its budget is spent), sending a bounded number of
commands, and never report a store error. Every test runs on a real redis-server; the commands
are counted by a client that records what it sends.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

import pytest
import redis

from idempotent_lambda import IdempotencyAlreadyInProgressError, IdempotencyConfig, idempotent
from idempotent_lambda.persistence.redis import RedisCachePersistenceLayer
from idempotent_lambda.record import IdempotencyRecord, Status
from tests.integration._two_libraries import WAIT_S, Body
from tests.integration.test_redis_orphan_lock import (
    EVENT,
    HookedRedis,
    abandoned_record,
    context,
    theirs,
)


class CountingRedis(redis.Redis):
    """A real client that records the name of every command it sends."""

    def __init__(self, port: int) -> None:
        super().__init__(host="127.0.0.1", port=port)
        self.sent: list[str] = []
        self.changed = threading.Condition()

    def execute_command(self, *args: Any, **options: Any) -> Any:
        with self.changed:
            self.sent.append(str(args[0]).upper())
            self.changed.notify_all()
        return super().execute_command(*args, **options)

    def counts(self) -> collections.Counter[str]:
        with self.changed:
            return collections.Counter(self.sent)

    def wait_for(self, command: str, times: int) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.sent.count(command) >= times, WAIT_S)


def waiting(body: Body, client: CountingRedis, wait_s: float) -> Any:
    store = RedisCachePersistenceLayer(client=client)
    config = IdempotencyConfig(wait_for_in_progress_seconds=wait_s)  # the default format
    return idempotent(persistence_store=store, config=config)(body.handler)


def lock_polls_bound(wait_s: float) -> int:
    """The most reads a waiter may send in ``wait_s``: its pauses grow from 20 ms to 0.5 s."""
    return 9 + int(wait_s / 0.5) + 1


def test_a_waiter_behind_a_lock_whose_holder_stalls_answers_in_progress(
    redis_port: int, redis_client: redis.Redis
) -> None:
    """The lock's holder stalls past the waiter's budget: in progress, after one claim."""
    key = abandoned_record(redis_port, redis_client)
    redis_client.set(f"{key}:lock", "True", ex=600)  # a taker that stalls before it overwrites
    body, client = Body(), CountingRedis(redis_port)
    wait_s = 2.0

    with pytest.raises(IdempotencyAlreadyInProgressError) as refused:
        waiting(body, client, wait_s)(EVENT, context())

    sent = client.counts()
    assert (0, 1, 1, 1) == (body.calls, sent["EVAL"], sent["SET"], sent["PTTL"])
    assert 1 <= sent["GET"] <= lock_polls_bound(wait_s)
    assert set(sent) == {"EVAL", "SET", "PTTL", "GET"}
    lock_end_ms = refused.value.lease_expires_at_ms
    assert lock_end_ms is not None
    assert lock_end_ms > 1000 * int(redis_client.time()[0]) + 500_000  # the lock's end, not the
    # abandoned record's lease, which ended a minute ago


def test_a_waiter_behind_a_lock_gets_the_takers_result(
    redis_port: int, redis_client: redis.Redis
) -> None:
    """Powertools holds the lock while the waiter polls, then overwrites and completes."""
    abandoned_record(redis_port, redis_client)
    body, client = Body(), CountingRedis(redis_port)
    powertools_client = HookedRedis(redis_port)
    answers: list[Any] = []

    def wait_in_thread() -> None:
        try:
            answers.append(waiting(body, client, WAIT_S)(EVENT, context()))
        except BaseException as exc:  # reported by the assertions below
            answers.append(exc)

    waiter = threading.Thread(target=wait_in_thread)

    def waiter_meets_the_lock() -> None:
        waiter.start()
        assert client.wait_for("GET", 3)  # refused by the lock, then polling for a while

    powertools_client.before_overwrite = waiter_meets_the_lock
    result = theirs(body, powertools_client)(EVENT, context())
    waiter.join(WAIT_S)

    assert [result] == answers
    assert 1 == body.calls
    sent = client.counts()
    assert (1, 1, 1) == (sent["EVAL"], sent["SET"], sent["PTTL"])  # one claim, no retries
    assert sent["GET"] <= lock_polls_bound(WAIT_S)


def test_a_waiter_takes_over_once_the_lock_of_a_crashed_taker_ends(
    redis_port: int, redis_client: redis.Redis
) -> None:
    """The lock's holder died before it overwrote: the waiter claims once the lock has ended."""
    key = abandoned_record(redis_port, redis_client)
    redis_client.set(f"{key}:lock", "True", px=1500)
    body, client = Body(), CountingRedis(redis_port)

    result = waiting(body, client, WAIT_S)(EVENT, context())

    assert ({"order": "o-1", "run": 1}, 1) == (result, body.calls)
    sent = client.counts()
    # Refused (claim, lock, its life), then the takeover (claim, lock, claim), then completion.
    assert (4, 2, 1) == (sent["EVAL"], sent["SET"], sent["PTTL"])
    assert sent["GET"] <= lock_polls_bound(WAIT_S)


def test_the_holder_reported_behind_a_lock_is_nobody_s_claim(redis_client: redis.Redis) -> None:
    """It has an owner no invocation has (the lock's key): a durable replay, which adopts a
    claim without an owner as its own, cannot mistake it for the claim it took earlier."""
    store = RedisCachePersistenceLayer(client=redis_client).with_record_format("powertools")
    now_ms = 1000 * int(redis_client.time()[0])

    def claim(owner: str, lease_end_ms: int) -> Any:
        record = IdempotencyRecord(
            "k#1", Status.IN_PROGRESS, now_ms // 1000 + 3600, lease_end_ms, owner=owner
        )
        return store.claim(record, now_ms=now_ms, lease_cutoff_ms=now_ms)

    assert claim("a", now_ms - 1).claimed  # a record abandoned at once
    redis_client.set("k#1:lock", "True", ex=600)  # another caller is taking it over
    outcome = claim("b", now_ms + 60_000)

    assert not outcome.claimed
    assert outcome.previous is not None
    assert (Status.IN_PROGRESS, "k#1:lock") == (outcome.previous.status, outcome.previous.owner)
    assert outcome.previous.in_progress_expiry_timestamp >= now_ms + 500_000
