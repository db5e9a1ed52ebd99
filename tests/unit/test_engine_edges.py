"""Edge paths of the state machine: misbehaving stores, odd contexts, extreme payloads.

Every test runs on a ``def`` and on an ``async def`` handler (the `mode` fixture).
"""

from __future__ import annotations

from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyConfig,
    IdempotencyKeyError,
    IdempotencyPersistenceLayerError,
    IdempotencyRecord,
    IdempotencyUnstorableResultError,
    InMemoryPersistenceLayer,
    Status,
    idempotent,
)
from idempotent_lambda._identity import digest
from idempotent_lambda.persistence.base import ClaimOutcome
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests.unit._doubles import Decisions, Runs, SpyStore
from tests.unit._modes import Mode

EVENT = {"order_id": 7}


class RefusingStore(SpyStore):
    """A store whose claims fail with no blocking record, ``refusals`` times."""

    def __init__(self, inner: InMemoryPersistenceLayer, refusals: int) -> None:
        super().__init__(inner)
        self.refusals = refusals

    def claim(
        self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int
    ) -> ClaimOutcome:
        """Refuse while refusals remain, then claim for real."""
        if self.calls["claim"] < self.refusals:
            self.calls["claim"] += 1
            return ClaimOutcome(claimed=False, previous=None)
        return super().claim(record, now_ms=now_ms, lease_cutoff_ms=lease_cutoff_ms)


def make_handler(
    mode: Mode, store: Any, config: IdempotencyConfig | None = None
) -> tuple[Any, Runs]:
    """Return an idempotent handler (``def`` or ``async def``) and its run counter."""
    runs = Runs()

    def body(event: dict[str, Any], context: Any) -> Any:
        runs(event)
        return event.get("result", "ok")

    return mode.wrap(
        idempotent(persistence_store=store, config=config, key_prefix="orders"), body
    ), runs


def test_claim_refused_without_a_record_is_retried(
    mode: Mode, idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A refused claim whose blocker vanished (released meanwhile) is simply claimed again."""
    store = RefusingStore(idempotency_store, refusals=2)
    handler, runs = make_handler(mode, store)

    assert "ok" == mode.call(handler, EVENT, lambda_context)
    assert 3 == store.calls["claim"]
    assert 1 == runs.count


def test_claims_refused_forever_give_up_with_a_store_error(
    mode: Mode, idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A store that refuses every claim without a holder: a bounded number of tries, then error."""
    store = RefusingStore(idempotency_store, refusals=10**6)
    handler, runs = make_handler(mode, store)

    with pytest.raises(IdempotencyPersistenceLayerError):
        mode.call(handler, EVENT, lambda_context)

    assert 0 == runs.count
    assert 10 <= store.calls["claim"] <= 100


def test_unstorable_result_with_a_failing_store_stays_in_progress(
    mode: Mode,
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
) -> None:
    """If even the unstorable marker cannot be written, the error is clear; the lease holds."""
    store = SpyStore(idempotency_store, fail={"complete"})
    config = IdempotencyConfig(event_key_jmespath="order_id", decision_hook=decisions)
    handler, _ = make_handler(mode, store, config)

    with pytest.raises(IdempotencyUnstorableResultError):
        mode.call(handler, {"order_id": 7, "result": {1, object}}, lambda_context)

    record = idempotency_store.get(decisions.last.key or "")
    assert record is not None
    assert Status.IN_PROGRESS == record.status
    assert ["COMPLETE_FAILED"] == decisions.outcomes


def test_completed_record_without_data_is_a_store_error(
    mode: Mode,
    idempotency_clock: ManualClock,
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
) -> None:
    """A COMPLETED record holding no result (corrupt) raises instead of replaying ``None``."""
    now = idempotency_clock.now_ms()
    corrupt = IdempotencyRecord(
        f"orders#{digest(IdempotencyConfig(), EVENT)}", Status.COMPLETED, now // 1000 + 60
    )
    idempotency_store.claim(corrupt, now_ms=now, lease_cutoff_ms=now)
    handler, runs = make_handler(mode, idempotency_store)

    with pytest.raises(IdempotencyPersistenceLayerError):
        mode.call(handler, EVENT, lambda_context)

    assert 0 == runs.count


def test_deeply_nested_key_material_is_a_key_error(
    mode: Mode, idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Key material nested beyond the recursion limit raises `IdempotencyKeyError`."""
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    handler, runs = make_handler(mode, idempotency_store)

    with pytest.raises(IdempotencyKeyError):
        mode.call(handler, {"k": deep}, lambda_context)

    assert 0 == runs.count


def test_deeply_nested_result_is_unstorable(
    mode: Mode, idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A result nested beyond the recursion limit raises `IdempotencyUnstorableResultError`."""
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    handler, _ = make_handler(
        mode, idempotency_store, IdempotencyConfig(event_key_jmespath="order_id")
    )

    with pytest.raises(IdempotencyUnstorableResultError):
        mode.call(handler, {"order_id": 1, "result": deep}, lambda_context)


class BrokenContext:
    """A context whose remaining time cannot be read as a number."""

    def get_remaining_time_in_millis(self) -> Any:
        return "soon"


class OverdueContext:
    """A context reporting negative remaining time."""

    def get_remaining_time_in_millis(self) -> int:
        return -5


@pytest.mark.parametrize(
    ("context", "lease_ms"),
    [(BrokenContext(), 900_000), (OverdueContext(), 0), (object(), 900_000)],
    ids=["unreadable", "overdue", "not-a-context"],
)
def test_odd_contexts_fall_back_sensibly(
    mode: Mode,
    idempotency_clock: ManualClock,
    idempotency_store: InMemoryPersistenceLayer,
    context: Any,
    lease_ms: int,
) -> None:
    """An unreadable context counts as none (900 s lease); negative time counts as zero."""
    store = SpyStore(idempotency_store)
    handler, _ = make_handler(mode, store)

    mode.call(handler, EVENT, context)

    assert idempotency_clock.now_ms() + lease_ms == store.claims[0].in_progress_expiry_timestamp


class BrokenClaimStore(SpyStore):
    """A custom store whose claim has a bug: it raises something that is not a store error."""

    def claim(
        self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int
    ) -> ClaimOutcome:
        """Raise a plain programming error."""
        raise KeyError("bug in a custom store")


def test_a_custom_store_bug_on_claim_propagates_unreported(
    mode: Mode,
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
) -> None:
    """Only store errors are reported as STORE_ERROR; a bug surfaces as itself, body not run."""
    handler, runs = make_handler(
        mode, BrokenClaimStore(idempotency_store), IdempotencyConfig(decision_hook=decisions)
    )
    with pytest.raises(KeyError, match="bug in a custom store"):
        mode.call(handler, EVENT, lambda_context)
    assert (0, []) == (runs.count, decisions.outcomes)


class NoNotesError(Exception):
    """An exception without ``add_note``, as every exception is on Python 3.10."""

    add_note = None


def test_failed_release_notes_the_error_even_without_add_note(
    mode: Mode, idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Without ``add_note`` (3.10) the body's own exception still propagates, with the note."""
    store = SpyStore(idempotency_store, fail={"release"})
    error = NoNotesError("declined")

    def body(event: dict[str, Any], context: Any) -> None:
        raise error

    handler = mode.wrap(idempotent(persistence_store=store, key_prefix="orders"), body)
    with pytest.raises(NoNotesError) as raised:
        mode.call(handler, EVENT, lambda_context)

    assert raised.value is error
    assert 1 == len(raised.value.__notes__)
    assert "releasing the record failed" in raised.value.__notes__[0]
