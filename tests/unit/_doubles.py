"""Test doubles shared by the unit tests: a store wrapper that counts and can fail, a recorder."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

from idempotent_lambda import (
    Decision,
    IdempotencyConfig,
    IdempotencyPersistenceLayerError,
    IdempotencyRecord,
)
from idempotent_lambda.persistence.base import BatchReadStore, ClaimOutcome, PersistenceStore
from idempotent_lambda.testing import ManualClock


class StoreDownError(Exception):
    """Stands for a backend error (what botocore would raise)."""


class SpyStore:
    """Wrap a store: count every call, remember claims, and fail chosen operations.

    Args:
        inner: The real store.
        fail: Operations (``"claim"``, ``"complete"``, ``"release"``, ``"get"``) that raise
            `IdempotencyPersistenceLayerError` caused by `StoreDownError`.
    """

    def __init__(self, inner: PersistenceStore, *, fail: set[str] | None = None) -> None:
        self.inner = inner
        self.clock = inner.clock
        self.fail = set(fail or ())
        self.calls: Counter[str] = Counter()
        self.claims: list[IdempotencyRecord] = []
        self._lock = threading.Lock()

    @property
    def total_calls(self) -> int:
        """Return how many store calls were made, all operations together."""
        with self._lock:
            return sum(self.calls.values())

    def _enter(self, operation: str) -> None:
        with self._lock:
            self.calls[operation] += 1
        if operation in self.fail:
            try:
                raise StoreDownError(f"{operation} is down")
            except StoreDownError as exc:
                raise IdempotencyPersistenceLayerError(f"store {operation} failed") from exc

    def claim(
        self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int
    ) -> ClaimOutcome:
        """Count, maybe fail, remember the record, then claim."""
        self._enter("claim")
        with self._lock:
            self.claims.append(record)
        return self.inner.claim(record, now_ms=now_ms, lease_cutoff_ms=lease_cutoff_ms)

    def complete(self, record: IdempotencyRecord) -> bool:
        """Count, maybe fail, then complete."""
        self._enter("complete")
        return self.inner.complete(record)

    def release(self, idempotency_key: str, owner: str) -> bool:
        """Count, maybe fail, then release."""
        self._enter("release")
        return self.inner.release(idempotency_key, owner)

    def get(self, idempotency_key: str) -> IdempotencyRecord | None:
        """Count, maybe fail, then read."""
        self._enter("get")
        return self.inner.get(idempotency_key)


class PollWatchingStore(SpyStore):
    """A spy store that signals each time a waiter polls the record."""

    def __init__(self, inner: PersistenceStore) -> None:
        super().__init__(inner)
        self.polled = threading.Event()

    def get(self, idempotency_key: str) -> IdempotencyRecord | None:
        """Read, then tell the test that a waiter is polling."""
        record = super().get(idempotency_key)
        self.polled.set()
        return record


class Decisions:
    """A ``decision_hook`` that remembers every decision, in order."""

    def __init__(self) -> None:
        self.items: list[Decision] = []
        self._lock = threading.Lock()

    def __call__(self, decision: Decision) -> None:
        with self._lock:
            self.items.append(decision)

    @property
    def outcomes(self) -> list[str]:
        """Return the outcome names, in order."""
        return [d.outcome.value for d in self.items]

    @property
    def last(self) -> Decision:
        """Return the latest decision."""
        return self.items[-1]


class Runs:
    """A thread-safe execution counter that also remembers what each execution received."""

    def __init__(self) -> None:
        self.seen: list[Any] = []
        self._lock = threading.Lock()

    def __call__(self, value: Any = None) -> int:
        with self._lock:
            self.seen.append(value)
            return len(self.seen)

    @property
    def count(self) -> int:
        """Return how many times the body ran."""
        with self._lock:
            return len(self.seen)


def is_unstorable_marker(data: str | None, config: IdempotencyConfig | None = None) -> bool:
    """Tell whether stored ``data`` is the unstorable-result marker of the config's format."""
    record_format = (config or IdempotencyConfig()).format
    return data is not None and record_format.unstorable_reason(data) is not None


def lease_end_ms(record: IdempotencyRecord) -> int:
    """Return a claimed record's lease end, which every claim has."""
    assert record.in_progress_expiry_timestamp is not None
    return record.in_progress_expiry_timestamp


class SimulatedPauses:
    """Stands in for the ``time`` module of the engine's sync driver: a wait polls on ``clock``.

    Each pause between two polls is recorded and moves ``clock`` instead of sleeping, so how long
    a duplicate waits is exact and does not depend on how loaded the machine is. A wait that goes
    on past ``limit_s`` fails (the hang it would be without this stand-in). Install it with
    ``monkeypatch.setattr(idempotent_lambda._effects, "time", SimulatedPauses(clock))``.
    """

    def __init__(self, clock: ManualClock, *, limit_s: float = 3600) -> None:
        self.clock = clock
        self.limit_s = limit_s
        self.seconds: list[float] = []

    @property
    def total(self) -> float:
        """Return the seconds paused so far, all pauses together."""
        return sum(self.seconds)

    def sleep(self, seconds: float) -> None:
        """Record the pause and move the clock by it."""
        self.seconds.append(seconds)
        assert self.total <= self.limit_s, f"still waiting after {self.total:.1f} s: a hang"
        self.clock.advance(seconds)


class BatchSpyStore(SpyStore):
    """A `SpyStore` that also reads many keys at once (``get_many``, counted and failable)."""

    def get_many(self, idempotency_keys: Sequence[str]) -> dict[str, IdempotencyRecord]:
        """Count, maybe fail, then read every key in one call."""
        self._enter("get_many")
        inner = self.inner
        assert isinstance(inner, BatchReadStore)
        return inner.get_many(idempotency_keys)
