"""Wait mode: a duplicate that arrives while the first call runs waits for its result."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyAlreadyInProgressError,
    IdempotencyConfig,
    IdempotencyRecord,
    InMemoryPersistenceLayer,
    Status,
    _effects,
    idempotent,
)
from idempotent_lambda._claim import CLOCK_SKEW_TOLERANCE_MS
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests.unit._doubles import Decisions, PollWatchingStore, Runs, SimulatedPauses

EVENT = {"order_id": 7}
#: Bounds that only a hang exhausts, however loaded the machine: how long a test waits for a
#: thread, how long a real duplicate may wait, and the remaining time of a real (wall) context.
TIMEOUT_S = 60
WAIT_S = 60
CONTEXT_MS = 120_000


class Holder:
    """Runs the first call in a thread and keeps it inside the body until released."""

    def __init__(self, handler: Callable[..., Any], holders: list[Holder], context: Any) -> None:
        holders.append(self)  # the handler finds its holder here
        self.inside = threading.Event()
        self.go = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(handler, context))
        self._thread.start()
        assert self.inside.wait(TIMEOUT_S)

    def _run(self, handler: Callable[..., Any], context: Any) -> None:
        try:
            self.result = handler(EVENT, context)
        except BaseException as exc:
            self.error = exc

    def finish(self) -> None:
        """Let the first call leave its body and wait for it."""
        self.go.set()
        self._thread.join(TIMEOUT_S)


def make_handler(
    store: Any, config: IdempotencyConfig, runs: Runs, *, fail_first: bool = False
) -> tuple[Callable[..., Any], list[Holder]]:
    """Return a handler whose first run blocks until its `Holder` is released."""
    holders: list[Holder] = []

    @idempotent(persistence_store=store, config=config, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        run = runs(event)
        if run == 1:
            holder = holders[0]
            holder.inside.set()
            assert holder.go.wait(TIMEOUT_S)
            if fail_first:
                raise RuntimeError("first run failed")
        return {"order_id": event["order_id"], "run": run}

    return handler, holders


def call_in_thread(function: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``function`` in a thread; its result or error lands in the returned dict."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = function()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_duplicate_waits_and_gets_the_first_result(decisions: Decisions) -> None:
    """With wait mode on, a duplicate returns the first call's result; the body ran once."""
    store = PollWatchingStore(InMemoryPersistenceLayer())
    runs = Runs()
    config = IdempotencyConfig(wait_for_in_progress_seconds=WAIT_S, decision_hook=decisions)
    handler, holders = make_handler(store, config, runs)
    first = Holder(handler, holders, FakeLambdaContext(CONTEXT_MS))

    thread, waiter = call_in_thread(lambda: handler(EVENT, FakeLambdaContext(CONTEXT_MS)))
    assert store.polled.wait(TIMEOUT_S)
    first.finish()
    thread.join(TIMEOUT_S)

    assert {"order_id": 7, "run": 1} == first.result
    assert {"result": first.result} == waiter
    assert 1 == runs.count
    assert ["CLAIMED", "REPLAYED"] == decisions.outcomes
    assert "wait" == decisions.last.source


def test_wait_is_bounded_by_the_waiters_remaining_time(
    monkeypatch: pytest.MonkeyPatch, idempotency_clock: ManualClock
) -> None:
    """A waiter with little time left gives up within it, with an in-progress error."""
    store = InMemoryPersistenceLayer(clock=idempotency_clock)
    runs = Runs()
    config = IdempotencyConfig(wait_for_in_progress_seconds=60)
    handler, holders = make_handler(store, config, runs)
    first = Holder(handler, holders, FakeLambdaContext(30_000, clock=idempotency_clock))
    pauses = SimulatedPauses(idempotency_clock)
    monkeypatch.setattr(_effects, "time", pauses)

    with pytest.raises(IdempotencyAlreadyInProgressError):
        handler(EVENT, FakeLambdaContext(400, clock=idempotency_clock))
    first.finish()

    assert 0 < pauses.total <= 0.4
    assert 1 == runs.count


def test_wait_is_bounded_by_wait_for_in_progress_seconds(
    monkeypatch: pytest.MonkeyPatch, idempotency_clock: ManualClock
) -> None:
    """A waiter gives up after ``wait_for_in_progress_seconds`` even with time to spare."""
    store = InMemoryPersistenceLayer(clock=idempotency_clock)
    config = IdempotencyConfig(wait_for_in_progress_seconds=0.3)
    handler, holders = make_handler(store, config, Runs())
    first = Holder(handler, holders, FakeLambdaContext(30_000, clock=idempotency_clock))
    pauses = SimulatedPauses(idempotency_clock)
    monkeypatch.setattr(_effects, "time", pauses)

    with pytest.raises(IdempotencyAlreadyInProgressError):
        handler(EVENT, FakeLambdaContext(30_000, clock=idempotency_clock))
    first.finish()

    assert 0.1 < pauses.total <= 0.3


def test_waiter_takes_over_after_the_first_call_releases(decisions: Decisions) -> None:
    """If the first call fails and releases, the waiter claims the key and runs the body."""
    store = PollWatchingStore(InMemoryPersistenceLayer())
    runs = Runs()
    config = IdempotencyConfig(wait_for_in_progress_seconds=WAIT_S, decision_hook=decisions)
    handler, holders = make_handler(store, config, runs, fail_first=True)
    first = Holder(handler, holders, FakeLambdaContext(CONTEXT_MS))

    thread, waiter = call_in_thread(lambda: handler(EVENT, FakeLambdaContext(CONTEXT_MS)))
    assert store.polled.wait(TIMEOUT_S)
    first.finish()
    thread.join(TIMEOUT_S)

    assert isinstance(first.error, RuntimeError)
    assert {"result": {"order_id": 7, "run": 2}} == waiter
    assert ["RELEASED", "CLAIMED"] == decisions.outcomes


def test_waiter_takes_over_when_the_holders_lease_passes(
    idempotency_clock: ManualClock, decisions: Decisions
) -> None:
    """A waiter whose holder's lease passes (moved clock) takes over and runs the body."""
    store = PollWatchingStore(InMemoryPersistenceLayer(clock=idempotency_clock))
    runs = Runs()
    config = IdempotencyConfig(wait_for_in_progress_seconds=600, decision_hook=decisions)

    @idempotent(persistence_store=store, config=config, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> int:
        return runs(event)

    now = idempotency_clock.now_ms()
    key = f"orders#{_digest(EVENT)}"
    stuck = IdempotencyRecord(
        key, Status.IN_PROGRESS, now // 1000 + 3600, now + 5_000, owner="crashed"
    )
    store.inner.claim(stuck, now_ms=now, lease_cutoff_ms=now)

    thread, waiter = call_in_thread(lambda: handler(EVENT, None))
    assert store.polled.wait(TIMEOUT_S)
    idempotency_clock.advance(ms=5_000 + CLOCK_SKEW_TOLERANCE_MS + 1)
    thread.join(TIMEOUT_S)

    assert {"result": 1} == waiter
    assert ["TAKEN_OVER"] == decisions.outcomes


def _digest(material: Any) -> str:
    from idempotent_lambda._identity import digest

    return digest(IdempotencyConfig(), material)


def _stuck_holder(store: Any, clock: ManualClock, lease_ms: int) -> None:
    """Put an IN_PROGRESS record for EVENT under prefix "orders", live for ``lease_ms``."""
    now = clock.now_ms()
    key = f"orders#{_digest(EVENT)}"
    stuck = IdempotencyRecord(
        key, Status.IN_PROGRESS, now // 1000 + 7200, now + lease_ms, owner="crashed"
    )
    store.inner.claim(stuck, now_ms=now, lease_cutoff_ms=now)


def test_infinite_wait_takes_over_when_the_holders_lease_passes(
    idempotency_clock: ManualClock, decisions: Decisions
) -> None:
    """``math.inf`` waits as long as the holder's lease (no OverflowError), then takes over."""
    store = PollWatchingStore(InMemoryPersistenceLayer(clock=idempotency_clock))
    runs = Runs()
    config = IdempotencyConfig(wait_for_in_progress_seconds=math.inf, decision_hook=decisions)

    @idempotent(persistence_store=store, config=config, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> int:
        return runs(event)

    _stuck_holder(store, idempotency_clock, 5_000)
    thread, waiter = call_in_thread(lambda: handler(EVENT, None))
    assert store.polled.wait(TIMEOUT_S)
    idempotency_clock.advance(ms=5_000 + CLOCK_SKEW_TOLERANCE_MS + 1)
    thread.join(TIMEOUT_S)

    assert {"result": 1} == waiter
    assert ["TAKEN_OVER"] == decisions.outcomes


def test_infinite_wait_stops_before_the_waiters_own_deadline(
    idempotency_clock: ManualClock,
) -> None:
    """With a Lambda context, ``math.inf`` means "until my own deadline": then in-progress."""
    store = PollWatchingStore(InMemoryPersistenceLayer(clock=idempotency_clock))
    config = IdempotencyConfig(wait_for_in_progress_seconds=math.inf)

    @idempotent(persistence_store=store, config=config, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> int:
        return 1

    _stuck_holder(store, idempotency_clock, 3_600_000)
    context = FakeLambdaContext(60_000, clock=idempotency_clock)
    thread, waiter = call_in_thread(lambda: handler(EVENT, context))
    assert store.polled.wait(TIMEOUT_S)
    idempotency_clock.advance(ms=60_000)
    thread.join(TIMEOUT_S)

    assert isinstance(waiter.get("error"), IdempotencyAlreadyInProgressError)


def test_infinite_wait_without_a_context_stops_at_the_waiters_own_lease(
    idempotency_clock: ManualClock,
) -> None:
    """Without a context, ``math.inf`` waits at most the waiter's own lease (900 s here)."""
    store = PollWatchingStore(InMemoryPersistenceLayer(clock=idempotency_clock))
    config = IdempotencyConfig(wait_for_in_progress_seconds=math.inf)

    @idempotent(persistence_store=store, config=config, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> int:
        return 1

    _stuck_holder(store, idempotency_clock, 3_600_000)
    thread, waiter = call_in_thread(lambda: handler(EVENT, None))
    assert store.polled.wait(TIMEOUT_S)
    idempotency_clock.advance(seconds=config.lease_seconds_without_context)
    thread.join(TIMEOUT_S)

    assert isinstance(waiter.get("error"), IdempotencyAlreadyInProgressError)
