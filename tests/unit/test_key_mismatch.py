"""The engine never replays, waits on or validates against another key's record (issue 11, 2).

`OneItemStore` acts out a DynamoDB table keyed differently from its store (``sort_key_attr`` on
a table whose only key is ``id``): every key lands on one item, which keeps the key it was
written with.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from idempotent_lambda import IdempotencyConfig, IdempotencyRecord, Status, idempotent
from idempotent_lambda.exceptions import (
    IdempotencyKeySchemaError,
    IdempotencyPersistenceLayerError,
)
from idempotent_lambda.persistence.base import ClaimOutcome, claim_allowed
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests.unit._doubles import Decisions, Runs
from tests.unit._modes import Mode


class OneItemStore:
    """A store whose every key reads and writes the same single item."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.item: IdempotencyRecord | None = None
        self._lock = threading.Lock()

    def claim(
        self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int
    ) -> ClaimOutcome:
        """Write ``record`` over the one item, under the usual claim rule."""
        with self._lock:
            previous = self.item
            if not claim_allowed(previous, now_ms=now_ms, lease_cutoff_ms=lease_cutoff_ms):
                return ClaimOutcome(claimed=False, previous=previous)
            self.item = record
            return ClaimOutcome(claimed=True, previous=previous)

    def complete(self, record: IdempotencyRecord) -> bool:
        """Replace the item if it is the caller's IN_PROGRESS claim."""
        with self._lock:
            if not self._owned_by(record.owner):
                return False
            self.item = record
            return True

    def release(self, idempotency_key: str, owner: str) -> bool:
        """Delete the item if it is the caller's IN_PROGRESS claim."""
        with self._lock:
            if not self._owned_by(owner):
                return False
            self.item = None
            return True

    def get(self, idempotency_key: str) -> IdempotencyRecord | None:
        """Return the one item, whatever key was asked for."""
        with self._lock:
            return self.item

    def _owned_by(self, owner: str | None) -> bool:
        item = self.item
        return item is not None and item.status is Status.IN_PROGRESS and item.owner == owner


def orders_handler(mode: Mode, store: OneItemStore, runs: Runs, **config: Any) -> Any:
    """Return an idempotent handler that answers with the order it was given."""

    def body(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs(event)
        return {"order": event["order"]}

    return mode.wrap(idempotent(persistence_store=store, config=IdempotencyConfig(**config)), body)


def test_another_keys_completed_record_is_never_replayed(
    mode: Mode,
    idempotency_clock: ManualClock,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
) -> None:
    """Order 2 meets order 1's record: a typed error naming the cause, not order 1's result."""
    store, runs = OneItemStore(idempotency_clock), Runs()
    handler = orders_handler(mode, store, runs, decision_hook=decisions)

    assert {"order": 1} == mode.call(handler, {"order": 1}, lambda_context)
    with pytest.raises(IdempotencyKeySchemaError, match="another idempotency key") as raised:
        mode.call(handler, {"order": 2}, lambda_context)

    assert isinstance(raised.value, IdempotencyPersistenceLayerError)
    assert [{"order": 1}] == runs.seen
    assert ["CLAIMED", "STORE_ERROR"] == decisions.outcomes


def test_another_keys_in_progress_record_is_not_waited_on(
    mode: Mode, idempotency_clock: ManualClock, lambda_context: FakeLambdaContext
) -> None:
    """Another key's live claim is no reason to wait or to answer "in progress"."""
    store, runs = OneItemStore(idempotency_clock), Runs()
    handler = orders_handler(
        mode, store, runs, event_key_jmespath="order", wait_for_in_progress_seconds=30
    )
    store.item = IdempotencyRecord(
        "someone-else#1",
        Status.IN_PROGRESS,
        idempotency_clock.now_ms() // 1000 + 3600,
        idempotency_clock.now_ms() + 60_000,
        owner="other",
    )

    with pytest.raises(IdempotencyKeySchemaError):
        mode.call(handler, {"order": 2}, lambda_context)
    assert 0 == runs.count


def test_a_claim_that_replaced_another_keys_record_is_released(
    mode: Mode, idempotency_clock: ManualClock, lambda_context: FakeLambdaContext
) -> None:
    """Our claim overwrote another key's expired record: it is released, the body never runs."""
    store, runs = OneItemStore(idempotency_clock), Runs()
    handler = orders_handler(mode, store, runs)
    store.item = IdempotencyRecord(
        "someone-else#1", Status.COMPLETED, idempotency_clock.now_ms() // 1000 - 1, None, "{}"
    )

    with pytest.raises(IdempotencyKeySchemaError):
        mode.call(handler, {"order": 2}, lambda_context)
    assert (0, None) == (runs.count, store.item)
