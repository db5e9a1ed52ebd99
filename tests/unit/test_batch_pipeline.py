"""Ordered lanes claim ahead and complete behind, and keep every ordering and failure rule."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from idempotent_lambda import IdempotencyConfig, IdempotencyRecord, InMemoryPersistenceLayer
from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler
from idempotent_lambda.exceptions import IdempotencyTransactionError
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from idempotent_lambda.transaction import current_transaction
from tests.unit._doubles import SpyStore
from tests.unit.test_batch_rules import FIFO_ARN, batch, failed, message


class LogStore(SpyStore):
    """A spy store that also writes each call into one shared, ordered log."""

    def __init__(self, inner: Any, log: list[str], *, fail: set[str] | None = None) -> None:
        super().__init__(inner, fail=fail)
        self.log = log
        self.keys: list[str] = []

    def _enter(self, operation: str) -> None:
        with self._lock:
            self.log.append(operation)
        super()._enter(operation)

    def claim(self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int) -> Any:
        """Remember the key, then claim."""
        with self._lock:
            self.keys.append(record.idempotency_key)
        return super().claim(record, now_ms=now_ms, lease_cutoff_ms=lease_cutoff_ms)

    def statuses(self) -> Counter[str]:
        """Return how many claimed keys are COMPLETED, IN_PROGRESS or gone."""
        found = (self.inner.get(key) for key in dict.fromkeys(self.keys))
        return Counter("gone" if r is None else r.status.value for r in found)


def group(size: int, name: str = "g") -> list[dict[str, Any]]:
    """Return ``size`` FIFO messages of one group, ``{name}-0`` first."""
    return [message(f"{name}-{n}", {"n": n}, arn=FIFO_ARN, group=name) for n in range(size)]


def fifo_handler(store: Any, log: list[str], fail: set[str] = frozenset(), **options: Any) -> Any:  # type: ignore[assignment]
    """Return a FIFO batch handler that logs each body run and fails the ids in ``fail``."""
    lock = threading.Lock()

    @idempotent_sqs_handler(persistence_store=store, key_prefix="orders", **options)
    def handler(record: SQSRecord, context: Any) -> str:
        with lock:
            log.append(f"run {record.message_id}")
        if record.message_id in fail:
            raise RuntimeError("refused")
        return record.message_id

    return handler


def runs(log: list[str]) -> list[str]:
    """Return the message ids whose body ran, in order."""
    return [entry.removeprefix("run ") for entry in log if entry.startswith("run ")]


def test_a_chain_claims_in_one_wave_before_its_first_body_and_runs_in_order(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Every claim precedes the first body; bodies run in chain order; 2 calls a record."""
    log: list[str] = []
    store = LogStore(idempotency_store, log)
    answer = fifo_handler(store, log)(batch(*group(6)), lambda_context)
    assert [] == failed(answer)
    assert ["claim"] * 6 == log[:6]
    assert [f"g-{n}" for n in range(6)] == runs(log)
    assert Counter({"claim": 6, "complete": 6}) == store.calls
    assert Counter({"COMPLETED": 6}) == store.statuses()


def test_an_earlier_failure_releases_the_claims_taken_ahead(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The rest of the chain never runs, is reported, and its claims are gone at the answer."""
    log: list[str] = []
    store = LogStore(idempotency_store, log)
    answer = fifo_handler(store, log, {"g-1"})(batch(*group(5)), lambda_context)
    assert ["g-1", "g-2", "g-3", "g-4"] == failed(answer)
    assert ["g-0", "g-1"] == runs(log)
    assert Counter({"COMPLETED": 1, "gone": 4}) == store.statuses()
    assert "release" == log[-1] or "complete" == log[-1]  # nothing after the answer


def test_a_failed_release_leaves_the_claims_to_their_lease_and_redelivery_takes_over(
    idempotency_store: InMemoryPersistenceLayer,
    idempotency_clock: ManualClock,
    lambda_context: FakeLambdaContext,
) -> None:
    """Releases that fail: same answer; once the leases end the next delivery runs the rest."""
    log: list[str] = []
    store = LogStore(idempotency_store, log, fail={"release"})
    handler = fifo_handler(store, log, {"g-1"})
    assert ["g-1", "g-2", "g-3", "g-4"] == failed(handler(batch(*group(5)), lambda_context))
    assert Counter({"COMPLETED": 1, "IN_PROGRESS": 4}) == store.statuses()

    store.fail.clear()
    idempotency_clock.advance(seconds=31 + 1)  # past the first invocation's deadline and skew
    log.clear()
    handler = fifo_handler(store, log)
    later = FakeLambdaContext(30_000, clock=idempotency_clock)
    assert [] == failed(handler(batch(*group(5)), later))
    assert ["g-1", "g-2", "g-3", "g-4"] == runs(log)  # g-0 replays, it never runs again
    assert Counter({"COMPLETED": 5}) == store.statuses()


def test_the_time_budget_releases_the_claims_of_records_it_stops(
    idempotency_store: InMemoryPersistenceLayer,
    idempotency_clock: ManualClock,
    lambda_context: FakeLambdaContext,
) -> None:
    """Records past the margin are reported, their claims released before the answer."""
    log: list[str] = []
    store = LogStore(idempotency_store, log)

    @idempotent_sqs_handler(persistence_store=store, time_safety_margin_ms=5_000)
    def handler(record: SQSRecord, context: Any) -> None:
        log.append(f"run {record.message_id}")
        idempotency_clock.advance(seconds=10)

    assert ["g-3", "g-4"] == failed(handler(batch(*group(5)), lambda_context))
    assert ["g-0", "g-1", "g-2"] == runs(log)
    assert Counter({"COMPLETED": 3, "gone": 2}) == store.statuses()


def test_a_lane_that_would_start_after_the_time_budget_claims_nothing(
    idempotency_store: InMemoryPersistenceLayer,
    idempotency_clock: ManualClock,
    lambda_context: FakeLambdaContext,
) -> None:
    """Once the batch has stopped, a lane not started yet is reported without a claim."""
    log: list[str] = []
    store = LogStore(idempotency_store, log)

    @idempotent_sqs_handler(persistence_store=store, time_safety_margin_ms=5_000, max_concurrency=1)
    def handler(record: SQSRecord, context: Any) -> None:
        log.append(f"run {record.message_id}")
        idempotency_clock.advance(seconds=3_600)

    answer = handler(batch(*group(2, "a"), *group(2, "b")), lambda_context)
    assert ["a-1", "b-0", "b-1"] == failed(answer)
    assert ["a-0"] == runs(log)
    assert Counter({"claim": 2, "complete": 1, "release": 1}) == store.calls


def test_a_failed_completion_keeps_the_record_in_progress_and_the_batch_succeeds(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """As run one by one: every record runs, none is reported, each stays IN_PROGRESS."""
    log: list[str] = []
    store = LogStore(idempotency_store, log, fail={"complete"})
    assert [] == failed(fifo_handler(store, log)(batch(*group(4)), lambda_context))
    assert ["g-0", "g-1", "g-2", "g-3"] == runs(log)
    assert Counter({"IN_PROGRESS": 4}) == store.statuses()


def test_a_claim_ahead_replays_completed_records_and_stops_at_a_live_claim(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
) -> None:
    """g-1 done earlier replays; g-3 held by a live invocation fails, g-4 is released."""
    log: list[str] = []
    records = group(5)
    first = fifo_handler(idempotency_store, log)
    first(batch(records[1]), lambda_context)
    stuck = LogStore(idempotency_store, [], fail={"release"})

    @idempotent_sqs_handler(persistence_store=stuck, key_prefix="orders")
    def hold(record: SQSRecord, context: Any) -> None:
        raise RuntimeError("its claim stays, live until its lease ends")

    hold(batch(records[3]), lambda_context)
    log.clear()
    store = LogStore(idempotency_store, log)
    answer = fifo_handler(store, log)(batch(*records), lambda_context)
    assert ["g-3", "g-4"] == failed(answer)
    assert ["g-0", "g-2"] == runs(log)
    assert Counter({"COMPLETED": 3, "IN_PROGRESS": 1, "gone": 1}) == store.statuses()


def test_a_repeated_key_in_a_chain_replays_the_earlier_result() -> None:
    """The second record of one key claims after the first completed, and replays it."""
    log: list[str] = []
    store = LogStore(InMemoryPersistenceLayer(), log)
    records = group(3)
    records[2]["body"] = records[0]["body"]
    config = IdempotencyConfig(event_key_jmespath="body")
    handler = fifo_handler(store, log, config=config, max_concurrency=4)
    assert [] == failed(handler(batch(*records), None))
    assert ["g-0", "g-1"] == runs(log)


def test_each_record_of_a_chain_runs_in_its_own_transaction_and_nothing_leaks(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Claims taken ahead do not share one transaction; none is open after the batch."""
    seen: list[int] = []

    @idempotent_sqs_handler(persistence_store=idempotency_store, max_concurrency=1)
    def handler(record: SQSRecord, context: Any) -> None:
        seen.append(id(current_transaction()))

    assert [] == failed(handler(batch(*group(3)), lambda_context))
    assert 3 == len(set(seen))
    with pytest.raises(IdempotencyTransactionError):
        current_transaction()
