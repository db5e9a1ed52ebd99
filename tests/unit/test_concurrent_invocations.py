"""Several invocations at once in one process: every lease comes from its own invocation.

Eight invocations with deadlines minutes apart run at once, as threads or as asyncio tasks,
and wait for each other before their nested calls, so all of them are live while each claims.
Each one's records are told apart by their key prefix. A nested call in the handler's thread
or task, or in a thread that copies its context, must lease by that invocation's deadline; a
plain thread started by the handler cannot tell which invocation it serves, and must fall back
to the configured lease, never another invocation's deadline.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyConfig,
    InMemoryPersistenceLayer,
    idempotent,
    idempotent_function,
)
from idempotent_lambda._lambda_context import reset
from idempotent_lambda.record import IdempotencyRecord
from idempotent_lambda.testing import FakeLambdaContext, ManualClock

N = 8
FALLBACK_MS = 900_000  # the configured lease: no in_progress_expiry_seconds, so 900 s


def deadline_ms(invocation: int) -> int:
    return 100_000 + invocation * 60_000


class LeaseLog(InMemoryPersistenceLayer):
    """An in-memory store that keeps each claim's lease end by key prefix."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.leases: dict[str, int | None] = {}
        self._lock = threading.Lock()

    def claim(self, record: IdempotencyRecord, **options: Any) -> Any:
        with self._lock:
            self.leases[record.idempotency_key.split("#")[0]] = record.in_progress_expiry_timestamp
        return super().claim(record, **options)


def expected_leases(now_ms: int) -> dict[str, int]:
    expected = {}
    for i in range(N):
        for where in ("handler", "same-thread", "copied-context"):
            expected[f"{i}.{where}"] = now_ms + deadline_ms(i)
        expected[f"{i}.plain-thread"] = now_ms + FALLBACK_MS
    return expected


def nested(store: LeaseLog, config: IdempotencyConfig, i: int, where: str) -> str:
    """Claim a record under ``"{i}.{where}"`` through an `idempotent_function`."""

    @idempotent_function(
        data_keyword_argument="order",
        persistence_store=store,
        config=config,
        key_prefix=f"{i}.{where}",
    )
    def process(order: dict[str, Any]) -> str:
        return where

    return process(order={"invocation": i})


def in_thread(work: Callable[[], Any], *, copy_context: bool) -> None:
    """Run ``work`` in a new thread: in a copy of this context, or in a plain one."""
    target = contextvars.copy_context().run if copy_context else (lambda f: f())
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target(work)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert not errors, errors


@pytest.fixture(autouse=True)
def _forget_registrations() -> Any:
    yield
    reset()


@pytest.mark.parametrize("registers", [False, True], ids=["decorated", "and-registered"])
def test_threaded_invocations_each_lease_by_their_own_deadline(registers: bool) -> None:
    """8 invocations in threads: nested calls never take another invocation's deadline."""
    clock = ManualClock()
    store = LeaseLog(clock)
    config = IdempotencyConfig()
    everyone_running = threading.Barrier(N, timeout=60)
    nested_done = threading.Barrier(N, timeout=60)

    def make_handler(i: int) -> Callable[[dict[str, Any], Any], int]:
        @idempotent(persistence_store=store, config=config, key_prefix=f"{i}.handler")
        def handler(event: dict[str, Any], context: Any) -> int:
            if registers:  # Powertools' documented pattern, on top of the decorator
                config.register_lambda_context(context)
            everyone_running.wait()
            nested(store, config, i, "same-thread")
            in_thread(lambda: nested(store, config, i, "copied-context"), copy_context=True)
            in_thread(lambda: nested(store, config, i, "plain-thread"), copy_context=False)
            nested_done.wait()
            return i

        return handler

    handlers = [make_handler(i) for i in range(N)]
    results: dict[int, int] = {}

    def invoke(i: int) -> None:
        results[i] = handlers[i]({"invocation": i}, FakeLambdaContext(deadline_ms(i), clock=clock))

    threads = [threading.Thread(target=invoke, args=(i,)) for i in range(N)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)

    assert {i: i for i in range(N)} == results
    assert expected_leases(clock.now_ms()) == store.leases


@pytest.mark.parametrize("registers", [False, True], ids=["decorated", "and-registered"])
def test_asyncio_invocations_each_lease_by_their_own_deadline(registers: bool) -> None:
    """8 invocations as tasks on one loop: the same rules, with the loop's worker threads."""
    clock = ManualClock()
    store = LeaseLog(clock)
    config = IdempotencyConfig()

    async def main() -> dict[int, int]:
        running = 0
        everyone_running = asyncio.Event()

        def make_handler(i: int) -> Callable[..., Any]:
            @idempotent(persistence_store=store, config=config, key_prefix=f"{i}.handler")
            async def handler(event: dict[str, Any], context: Any) -> int:
                nonlocal running
                if registers:
                    config.register_lambda_context(context)
                running += 1
                if running == N:
                    everyone_running.set()
                await asyncio.wait_for(everyone_running.wait(), 60)
                nested(store, config, i, "same-thread")  # in the task, on the loop's thread
                await asyncio.to_thread(nested, store, config, i, "copied-context")
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(None, nested, store, config, i, "plain-thread")
                return i

            return handler

        handlers = [make_handler(i) for i in range(N)]
        answers = await asyncio.gather(
            *(
                handlers[i]({"invocation": i}, FakeLambdaContext(deadline_ms(i), clock=clock))
                for i in range(N)
            )
        )
        return dict(enumerate(answers))

    results: dict[int, int] = {}
    # A loop of its own in a thread of its own: what its tasks registered goes with it.
    loop_thread = threading.Thread(target=lambda: results.update(asyncio.run(main())))
    loop_thread.start()
    loop_thread.join(120)

    assert {i: i for i in range(N)} == results
    assert expected_leases(clock.now_ms()) == store.leases


def test_a_thread_of_the_one_running_invocation_leases_by_its_deadline() -> None:
    """Lambda's classic model: one invocation, so a plain worker thread takes its context."""
    clock = ManualClock()
    store = LeaseLog(clock)
    config = IdempotencyConfig()

    @idempotent(persistence_store=store, config=config, key_prefix="0.handler")
    def handler(event: dict[str, Any], context: Any) -> str:
        in_thread(lambda: nested(store, config, 0, "plain-thread"), copy_context=False)
        return "done"

    handler({"invocation": 0}, FakeLambdaContext(deadline_ms(0), clock=clock))

    now = clock.now_ms()
    assert {"0.handler": now + deadline_ms(0), "0.plain-thread": now + deadline_ms(0)} == (
        store.leases
    )
