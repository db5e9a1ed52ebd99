"""A worker SIGKILLed while holding a claim, its zombie twin, and instances with skewed clocks.

Killed mid-handler: a spawned worker sends an HTTP request through `idempotent_http` against
the moto server and is SIGKILLed while its handler runs. A retry before the worker's lease ends
gets 409 with ``Retry-After``; once the lease has passed, a retry takes over and completes; the
killed worker's zombie twin (completing or releasing with the old owner token) changes nothing.

Clock skew: two instances of the same function share a store, one clock offset from the other.
The engine counts a lease as passed only `CLOCK_SKEW_TOLERANCE_MS` (1 s) after its end on the
claimer's clock, so an instance up to 1 s ahead never takes over a live invocation; beyond the
tolerance the takeover comes early by exactly the excess. Both stores are checked.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from idempotent_lambda import (
    DynamoDBPersistenceLayer,
    IdempotencyAlreadyInProgressError,
    IdempotencyConfig,
    IdempotencyRecord,
    InMemoryPersistenceLayer,
    Status,
    _effects,
    idempotent,
)
from idempotent_lambda._claim import CLOCK_SKEW_TOLERANCE_MS
from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.persistence.base import ClaimOutcome, PersistenceStore
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests.reliability import _workers
from tests.reliability._support import SECRET, Executions, stored_key, watchdog

KILLED_LEASE_MS = 20_000


def test_killed_worker_blocks_until_its_lease_ends_then_a_retry_takes_over(
    dynamodb_endpoint: str,
    idempotency_table: str,
    dynamodb_store: DynamoDBPersistenceLayer,
    tmp_path: Path,
) -> None:
    """SIGKILL mid-handler: 409 before the lease ends, takeover after, zombie twin powerless."""
    executions_file = tmp_path / "executions"
    spawn = multiprocessing.get_context("spawn")
    claimed = spawn.Event()
    worker = spawn.Process(
        target=_workers.hold_a_claim,
        args=(dynamodb_endpoint, idempotency_table, KILLED_LEASE_MS, str(executions_file), claimed),
    )
    worker.start()
    try:
        assert claimed.wait(120), "the worker never started its handler"
    finally:
        assert worker.pid is not None
        os.kill(worker.pid, signal.SIGKILL)
        worker.join(30)
    assert -signal.SIGKILL == worker.exitcode

    [zombie] = _scan(dynamodb_store)
    assert Status.IN_PROGRESS is zombie.status
    assert zombie.in_progress_expiry_timestamp is not None
    lease_end = zombie.in_progress_expiry_timestamp

    # A retry on an instance whose clock is 2 s before the lease end.
    executions = Executions()
    before = _http_handler(dynamodb_store, idempotency_table, lease_end - 2_000, executions)
    response = before(_workers.killed_request(), FakeLambdaContext(10_000))
    assert 409 == response["statusCode"]
    assert response["headers"]["Retry-After"] == "2"
    assert 0 == executions.total

    # Just inside the skew tolerance after the lease end: still in progress.
    edge = _http_handler(
        dynamodb_store, idempotency_table, lease_end + CLOCK_SKEW_TOLERANCE_MS, executions
    )
    assert 409 == edge(_workers.killed_request(), FakeLambdaContext(10_000))["statusCode"]

    # Past the lease and the tolerance: the retry takes over and completes.
    after = _http_handler(
        dynamodb_store, idempotency_table, lease_end + CLOCK_SKEW_TOLERANCE_MS + 1, executions
    )
    taken_over = after(_workers.killed_request(), FakeLambdaContext(10_000))
    assert 201 == taken_over["statusCode"]
    assert 1 == executions.total
    [current] = _scan(dynamodb_store)
    assert Status.COMPLETED is current.status
    assert current.owner != zombie.owner

    # The zombie twin finishes with the killed worker's owner token: nothing changes.
    assert zombie.owner is not None
    twin_result = replace(
        zombie,
        status=Status.COMPLETED,
        in_progress_expiry_timestamp=None,
        response_data=json.dumps({"statusCode": 201, "body": "zombie"}),
    )
    assert not dynamodb_store.complete(twin_result)
    assert not dynamodb_store.release(zombie.idempotency_key, zombie.owner)
    assert [current] == _scan(dynamodb_store)

    replay = after(_workers.killed_request(), FakeLambdaContext(10_000))
    assert (201, "true") == (replay["statusCode"], replay["headers"]["Idempotent-Replayed"])
    assert 1 == executions.total
    assert 1 == len(executions_file.read_text().splitlines())  # the killed worker's run


def _http_handler(
    store: DynamoDBPersistenceLayer, table: str, now_ms: int, executions: Executions
) -> Any:
    """Return the killed worker's handler on an instance whose clock reads ``now_ms``."""
    clock = ManualClock(now_ms)  # frozen: the boundaries are exact to the millisecond
    instance = DynamoDBPersistenceLayer(table, boto3_client=store._get_client(), clock=clock)

    @idempotent_http(persistence_store=instance, key_prefix="killed")
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        executions("order")
        return {"statusCode": 201, "body": json.dumps({"created": True, "card": SECRET})}

    return handler


def _scan(store: DynamoDBPersistenceLayer) -> list[IdempotencyRecord]:
    """Read every record as the default format's view of ``store`` does."""
    view = store.with_record_format(IdempotencyConfig().record_format)
    client = view._get_client()
    items = client.scan(TableName=view.table_name, ConsistentRead=True)["Items"]
    return [view._schema.from_item(item) for item in items]


# --- clock skew ------------------------------------------------------------------------------


class SkewedInstance:
    """One store as seen by an instance with its own clock (in-memory: a shared dict)."""

    def __init__(self, shared: PersistenceStore, clock: ManualClock) -> None:
        self._shared = shared
        self.clock = clock

    def claim(
        self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int
    ) -> ClaimOutcome:
        return self._shared.claim(record, now_ms=now_ms, lease_cutoff_ms=lease_cutoff_ms)

    def complete(self, record: IdempotencyRecord) -> bool:
        return self._shared.complete(record)

    def release(self, idempotency_key: str, owner: str) -> bool:
        return self._shared.release(idempotency_key, owner)

    def get(self, idempotency_key: str) -> IdempotencyRecord | None:
        return self._shared.get(idempotency_key)


@pytest.fixture(params=["in-memory", "dynamodb"])
def shared_store(request: pytest.FixtureRequest) -> PersistenceStore:
    """Return each store, to be shared by instances with different clocks."""
    if request.param == "in-memory":
        return InMemoryPersistenceLayer()
    store: PersistenceStore = request.getfixturevalue("dynamodb_store")
    return store


LEASE_MS = 10_000
CONFIG = IdempotencyConfig(event_key_jmespath="order")
EVENT = {"order": 7, "card": SECRET}


def _instance(shared: PersistenceStore, clock: Any, executions: Executions) -> Any:
    @idempotent(persistence_store=SkewedInstance(shared, clock), config=CONFIG, key_prefix="skew")
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        executions(clock)
        return {"order": event["order"], "card": SECRET}

    return handler


def _hold(shared: PersistenceStore, clock: ManualClock) -> int:
    """Make instance A hold the key with a 10 s lease on its clock; return the lease end."""
    now = clock.now_ms()
    record = IdempotencyRecord(
        idempotency_key=stored_key(CONFIG, EVENT, "skew"),
        status=Status.IN_PROGRESS,
        expiry_timestamp=now // 1000 + 3600,
        in_progress_expiry_timestamp=now + LEASE_MS,
        owner="instance-a",
    )
    assert shared.claim(record, now_ms=now, lease_cutoff_ms=now).claimed
    return now + LEASE_MS


@pytest.mark.parametrize("skew_ms", [-5_000, -1_000, 0, 500, 1_000])
@pytest.mark.parametrize("before_lease_end_ms", [1, 1_000])
def test_an_instance_within_the_tolerance_never_takes_over_a_live_lease(
    shared_store: PersistenceStore, skew_ms: int, before_lease_end_ms: int
) -> None:
    """B's clock is off by at most 1 s: while A's lease is live in true time, B gets in-progress."""
    true_time = ManualClock()
    lease_end = _hold(shared_store, true_time)
    true_time.set(lease_end - before_lease_end_ms)
    b_clock = ManualClock(true_time.now_ms() + skew_ms)
    executions = Executions()
    with pytest.raises(IdempotencyAlreadyInProgressError):
        _instance(shared_store, b_clock, executions)(EVENT, FakeLambdaContext(5_000, clock=b_clock))
    assert 0 == executions.total


@pytest.mark.parametrize("skew_ms", [1_002, 2_000, 5_000])
def test_beyond_the_tolerance_a_takeover_comes_early_by_the_excess(
    shared_store: PersistenceStore, skew_ms: int
) -> None:
    """B ahead by more than 1 s takes over A's lease (skew - 1 s) early, and not earlier."""
    true_time = ManualClock()
    lease_end = _hold(shared_store, true_time)
    excess = skew_ms - CLOCK_SKEW_TOLERANCE_MS
    executions = Executions()

    true_time.set(lease_end - excess)  # B reads lease_end + 1 s: not passed yet
    b_clock = ManualClock(true_time.now_ms() + skew_ms)
    with pytest.raises(IdempotencyAlreadyInProgressError):
        _instance(shared_store, b_clock, executions)(EVENT, FakeLambdaContext(5_000, clock=b_clock))

    true_time.set(lease_end - excess + 1)  # 1 ms later B takes over, excess-1 ms before the end
    b_clock.set(true_time.now_ms() + skew_ms)
    _instance(shared_store, b_clock, executions)(EVENT, FakeLambdaContext(5_000, clock=b_clock))
    assert 1 == executions.total


@pytest.mark.parametrize("skew_ms", [-1_000, 1_000])
def test_a_skewed_holder_keeps_its_lease_against_a_correct_clock(
    shared_store: PersistenceStore, skew_ms: int
) -> None:
    """The tolerance is symmetric: A's clock off by 1 s, B correct, B cannot take over early."""
    true_time = ManualClock()
    a_clock = ManualClock(true_time.now_ms() + skew_ms)
    a_lease_end_true = true_time.now_ms() + LEASE_MS  # A's lease in true time
    _hold(shared_store, a_clock)
    true_time.set(a_lease_end_true - 1)
    executions = Executions()
    with pytest.raises(IdempotencyAlreadyInProgressError):
        _instance(shared_store, true_time, executions)(
            EVENT, FakeLambdaContext(5_000, clock=true_time)
        )
    assert 0 == executions.total


@pytest.mark.parametrize("skew_ms", [-3_000, 3_000])
def test_a_completed_record_replays_across_skewed_instances(
    shared_store: PersistenceStore, skew_ms: int
) -> None:
    """Skew never turns a replay into a second execution inside the expiry window."""
    a_clock = ManualClock()
    b_clock = ManualClock(a_clock.now_ms() + skew_ms)
    executions = Executions()
    first = _instance(shared_store, a_clock, executions)(
        EVENT, FakeLambdaContext(5_000, clock=a_clock)
    )
    a_clock.advance(seconds=60)
    b_clock.advance(seconds=60)
    second = _instance(shared_store, b_clock, executions)(
        EVENT, FakeLambdaContext(5_000, clock=b_clock)
    )
    assert first == second
    assert 1 == executions.total


def test_waiting_on_a_clock_that_stands_still_ends_within_its_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: wait mode measured its budget only on the store's clock, so on a clock that
    does not move (a test's ManualClock) a duplicate of a never-ending call polled forever
    once its budget exceeded the longest pause (0.5 s). The pauses count now: the duplicate
    gives up once its pauses add up to its budget (1 s). The pauses are recorded, not slept,
    and the clock stays still, so the outcome does not depend on the machine's load."""
    clock = ManualClock()
    store = InMemoryPersistenceLayer(clock=clock)
    config = IdempotencyConfig(event_key_jmespath="order", wait_for_in_progress_seconds=1)
    executions = Executions()
    pauses = RecordedPauses()
    monkeypatch.setattr(_effects, "time", pauses)

    @idempotent(persistence_store=store, config=config, key_prefix="skew")
    def handler(event: dict[str, Any], context: Any) -> None:
        executions("run")

    _hold(store, clock)  # a holder whose lease never passes on this frozen clock
    with watchdog(60), pytest.raises(IdempotencyAlreadyInProgressError):
        handler(EVENT, FakeLambdaContext(30_000, clock=clock))
    assert 0.5 < sum(pauses.seconds) <= 1
    assert 0 == executions.total


class RecordedPauses:
    """Stands in for the ``time`` module of the engine's sync driver: pauses are only recorded.

    A wait that pauses for more than a minute in all fails at once (the hang it would be).
    """

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.seconds.append(seconds)
        assert sum(self.seconds) <= 60, "the duplicate is still waiting: a hang"
