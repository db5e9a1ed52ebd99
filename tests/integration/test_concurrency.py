"""Many concurrent invocations of one key: the body runs exactly once.

Threads race against every store; processes race against the DynamoDB-compatible server (and,
in test_redis_store, against redis-server).

moto's server does not serialise conditional writes: its check-then-write runs in the request
thread with no lock, so two racing ``PutItem``\\ s with ``attribute_not_exists`` can both succeed
(seen about once in 1500 rounds of 16 racing threads, and about once in 100 rounds with a short
thread switch interval). DynamoDB itself serialises writes to an item. ``serialised_moto`` gives
the in-process moto server that guarantee so these tests check the library, not moto; against
an external endpoint (``IDEMPOTENT_LAMBDA_TEST_ENDPOINT``) it does nothing.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyAlreadyInProgressError,
    IdempotencyConfig,
    InMemoryPersistenceLayer,
    idempotent,
)
from idempotent_lambda.persistence.base import PersistenceStore, store_for_format
from idempotent_lambda.testing import FakeLambdaContext
from tests.integration import _process_worker

THREADS = 16
PROCESSES = 4
#: Bounds that only a hang exhausts, however loaded the machine: how long a test waits for a
#: thread or process, how long a duplicate may wait, and the remaining time (the lease) of a call.
TIMEOUT_S = 120
WAIT_S = 120
CONTEXT_MS = 300_000


@pytest.fixture
def serialised_moto(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the in-process moto server apply conditional writes one at a time, as DynamoDB does."""
    if os.environ.get("IDEMPOTENT_LAMBDA_TEST_ENDPOINT"):
        return
    from moto.dynamodb.models import DynamoDBBackend

    lock = threading.Lock()
    for name in ("put_item", "update_item", "delete_item"):
        original = getattr(DynamoDBBackend, name)

        def serialised(*args: Any, __original: Any = original, **kwargs: Any) -> Any:
            with lock:
                return __original(*args, **kwargs)

        monkeypatch.setattr(DynamoDBBackend, name, serialised)


@pytest.fixture(params=["in-memory", "dynamodb", "redis"])
def store(request: pytest.FixtureRequest) -> PersistenceStore:
    """Return each store in turn, on the wall clock."""
    if request.param == "in-memory":
        return InMemoryPersistenceLayer()
    if request.param == "redis":
        redis_store: PersistenceStore = request.getfixturevalue("redis_store")
        return redis_store
    request.getfixturevalue("serialised_moto")
    dynamodb_store: PersistenceStore = request.getfixturevalue("dynamodb_store")
    return dynamodb_store


class Counter:
    """A thread-safe execution counter."""

    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            self.value += 1
            return self.value


def race(count: int, call: Callable[[], Any]) -> list[tuple[str, Any]]:
    """Start ``count`` threads at once, each calling ``call``; return their outcomes."""
    barrier = threading.Barrier(count)
    outcomes: list[tuple[str, Any]] = []
    lock = threading.Lock()

    def run() -> None:
        barrier.wait()
        try:
            outcome: tuple[str, Any] = ("result", call())
        except Exception as exc:
            outcome = ("error", exc)
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT_S)
    return outcomes


def test_threads_on_one_key_run_the_body_once(store: PersistenceStore) -> None:
    """16 threads at once: one runs the body, the other 15 get in-progress errors."""
    executions = Counter()
    refused = threading.Semaphore(0)

    @idempotent(persistence_store=store, key_prefix="threads")
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        executions()
        for _ in range(THREADS - 1):  # stay in progress until every duplicate was refused
            assert refused.acquire(timeout=TIMEOUT_S)
        return {"order_id": event["order_id"]}

    def call() -> Any:
        try:
            return handler({"order_id": 1}, FakeLambdaContext(CONTEXT_MS))
        except IdempotencyAlreadyInProgressError:
            refused.release()
            raise

    outcomes = race(THREADS, call)

    errors = [type(value).__name__ for kind, value in outcomes if kind == "error"]
    results = [value for kind, value in outcomes if kind == "result"]
    assert 1 == executions.value
    assert [{"order_id": 1}] == results
    assert ["IdempotencyAlreadyInProgressError"] * (THREADS - 1) == errors


def test_threads_in_wait_mode_all_get_the_one_result(
    store: PersistenceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """16 threads at once in wait mode: one execution, and all 16 return its exact result."""
    executions = Counter()
    config = IdempotencyConfig(wait_for_in_progress_seconds=WAIT_S)
    polling: set[int] = set()  # the threads that found the key in progress and poll it
    polled = threading.Condition()
    store = store_for_format(store, config.record_format)  # the view the engine reads through
    read = store.get

    def get(idempotency_key: str) -> Any:
        with polled:
            polling.add(threading.get_ident())
            polled.notify_all()
        return read(idempotency_key)

    monkeypatch.setattr(store, "get", get)

    @idempotent(persistence_store=store, config=config, key_prefix="threads")
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        run = executions()
        with polled:  # the work lasts until every duplicate is waiting for its result
            assert polled.wait_for(lambda: len(polling) == THREADS - 1, TIMEOUT_S)
        return {"order_id": event["order_id"], "run": run, "zero": 0, "empty": []}

    outcomes = race(THREADS, lambda: handler({"order_id": 1}, FakeLambdaContext(CONTEXT_MS)))

    assert 1 == executions.value
    assert [("result", {"order_id": 1, "run": 1, "zero": 0, "empty": []})] * THREADS == outcomes


def _race_processes(
    dynamodb_endpoint: str, table: str, executions_file: Path, wait_seconds: float
) -> list[tuple[str, Any]]:
    context = multiprocessing.get_context("spawn")
    ready = context.Semaphore(0)
    start = context.Event()
    arrived = context.Semaphore(0)
    results = context.Queue()
    processes = [
        context.Process(
            target=_process_worker.invoke,
            args=(
                dynamodb_endpoint,
                table,
                str(executions_file),
                wait_seconds,
                PROCESSES - 1,
                ready,
                start,
                arrived,
                results,
            ),
        )
        for _ in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    for _ in processes:  # every process imported, connected and is waiting: go
        assert ready.acquire(timeout=TIMEOUT_S)
    start.set()
    outcomes = [results.get(timeout=TIMEOUT_S) for _ in processes]
    for process in processes:
        process.join(TIMEOUT_S)
    assert [0] * PROCESSES == [process.exitcode for process in processes]
    return outcomes


@pytest.mark.usefixtures("serialised_moto")
def test_processes_on_one_key_run_the_body_once(
    dynamodb_endpoint: str, idempotency_table: str, tmp_path: Path
) -> None:
    """4 processes (spawned) on one key: exactly one execution; the rest are refused."""
    executions_file = tmp_path / "executions"

    outcomes = _race_processes(dynamodb_endpoint, idempotency_table, executions_file, 0)

    executions = executions_file.read_text().splitlines()
    kinds = sorted(kind for kind, _ in outcomes)
    assert 1 == len(executions)
    assert ["error"] * (PROCESSES - 1) + ["result"] == kinds
    assert {"IdempotencyAlreadyInProgressError"} == {v for k, v in outcomes if k == "error"}


@pytest.mark.usefixtures("serialised_moto")
def test_processes_in_wait_mode_all_get_the_one_result(
    dynamodb_endpoint: str, idempotency_table: str, tmp_path: Path
) -> None:
    """4 processes in wait mode: exactly one execution, and every process gets its result."""
    executions_file = tmp_path / "executions"

    outcomes = _race_processes(dynamodb_endpoint, idempotency_table, executions_file, WAIT_S)

    executions = executions_file.read_text().splitlines()
    winner = outcomes[0][1]
    assert 1 == len(executions)
    assert [("result", winner)] * PROCESSES == outcomes
    assert str(winner["pid"]) == executions[0]
