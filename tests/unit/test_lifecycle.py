"""The record lifecycle on the in-memory store: claim, complete, replay, release, lease, expiry.

Every test runs twice (the `mode` fixture): on a ``def`` handler and on an ``async def`` one.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyAlreadyInProgressError,
    IdempotencyConfig,
    IdempotencyPersistenceLayerError,
    IdempotencyRecord,
    IdempotencyValidationError,
    InMemoryPersistenceLayer,
    Status,
    idempotent,
)
from idempotent_lambda._claim import CLOCK_SKEW_TOLERANCE_MS
from idempotent_lambda._identity import digest
from idempotent_lambda.exceptions import IdempotencyPersistenceConfigError
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests.unit._doubles import Decisions, Runs, SpyStore, lease_end_ms
from tests.unit._modes import Mode

PREFIX = "orders"
EVENT = {"order_id": 7, "amount": 10}


def key_of(material: Any, config: IdempotencyConfig | None = None) -> str:
    """Return the stored key of ``material`` under PREFIX."""
    return f"{PREFIX}#{digest(config or IdempotencyConfig(), material)}"


def make_handler(
    mode: Mode, store: Any, config: IdempotencyConfig | None = None, runs: Runs | None = None
) -> Any:
    """Return an idempotent handler (``def`` or ``async def``) that counts its runs."""
    counter = runs if runs is not None else Runs()

    def body(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"order_id": event["order_id"], "run": counter(event)}

    return mode.wrap(idempotent(persistence_store=store, config=config, key_prefix=PREFIX), body)


def hold(store: InMemoryPersistenceLayer, key: str, *, lease_end_ms: int) -> None:
    """Make another (imaginary) invocation hold ``key`` until ``lease_end_ms``."""
    now = store.clock.now_ms()
    record = IdempotencyRecord(
        idempotency_key=key,
        status=Status.IN_PROGRESS,
        expiry_timestamp=now // 1000 + 3600,
        in_progress_expiry_timestamp=lease_end_ms,
        owner="someone-else",
    )
    assert store.claim(record, now_ms=now, lease_cutoff_ms=now).claimed


def test_first_call_runs_the_body_and_stores_its_result(
    mode: Mode, idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The first call runs the body, returns its result and leaves a COMPLETED record."""
    runs = Runs()
    handler = make_handler(mode, idempotency_store, runs=runs)
    assert mode.is_async == inspect.iscoroutinefunction(handler)

    result = mode.call(handler, EVENT, lambda_context)

    record = idempotency_store.get(key_of(EVENT))
    assert record is not None
    assert {"order_id": 7, "run": 1} == result
    assert 1 == runs.count
    assert Status.COMPLETED == record.status
    assert result == record.response_json_as_dict()


def test_replay_returns_the_stored_result_without_running_the_body(
    mode: Mode, idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A retry with the same payload gets an equal result and the body does not run again."""
    runs = Runs()
    handler = make_handler(mode, idempotency_store, runs=runs)

    first = mode.call(handler, EVENT, lambda_context)
    second = mode.call(handler, dict(EVENT), lambda_context)

    assert first == second
    assert 1 == runs.count


def test_different_payloads_run_separately(
    mode: Mode, idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Two payloads are two logical requests: the body runs for each."""
    runs = Runs()
    handler = make_handler(mode, idempotency_store, runs=runs)

    mode.call(handler, {"order_id": 1}, lambda_context)
    mode.call(handler, {"order_id": 2}, lambda_context)

    assert 2 == runs.count


def test_handler_error_releases_the_record_and_propagates_unchanged(
    mode: Mode,
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
) -> None:
    """The body raising deletes the claim and re-raises the very same exception object."""
    error = RuntimeError("payment declined")

    def body(event: dict[str, Any], context: Any) -> None:
        raise error

    handler = mode.wrap(
        idempotent(
            persistence_store=idempotency_store,
            config=IdempotencyConfig(decision_hook=decisions),
            key_prefix=PREFIX,
        ),
        body,
    )

    with pytest.raises(RuntimeError) as raised:
        mode.call(handler, EVENT, lambda_context)

    assert raised.value is error
    assert idempotency_store.get(key_of(EVENT)) is None
    assert ["RELEASED"] == decisions.outcomes


def test_retry_after_a_handler_error_runs_again(
    mode: Mode, idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """After a released failure the next attempt runs the body and its result is stored."""
    runs = Runs()

    def body(event: dict[str, Any], context: Any) -> str:
        if runs(event) == 1:
            raise ValueError("transient")
        return "done"

    handler = mode.wrap(idempotent(persistence_store=idempotency_store, key_prefix=PREFIX), body)

    with pytest.raises(ValueError, match="transient"):
        mode.call(handler, EVENT, lambda_context)
    assert "done" == mode.call(handler, EVENT, lambda_context)
    assert "done" == mode.call(handler, EVENT, lambda_context)

    assert 2 == runs.count


def test_failed_release_keeps_the_original_exception_with_a_note(
    mode: Mode,
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
) -> None:
    """When releasing fails too, the body's exception propagates, noted; the record stays."""
    store = SpyStore(idempotency_store, fail={"release"})
    error = KeyError("missing sku")

    def body(event: dict[str, Any], context: Any) -> None:
        raise error

    handler = mode.wrap(
        idempotent(
            persistence_store=store,
            config=IdempotencyConfig(decision_hook=decisions),
            key_prefix=PREFIX,
        ),
        body,
    )

    with pytest.raises(KeyError) as raised:
        mode.call(handler, EVENT, lambda_context)

    record = idempotency_store.get(key_of(EVENT))
    assert record is not None
    assert raised.value is error
    assert any("releasing the record failed" in note for note in raised.value.__notes__)
    assert Status.IN_PROGRESS == record.status
    assert ["RELEASE_FAILED"] == decisions.outcomes
    assert "StoreDownError" == decisions.last.error


def test_failed_completion_still_returns_the_result(
    mode: Mode,
    idempotency_clock: ManualClock,
    idempotency_store: InMemoryPersistenceLayer,
    decisions: Decisions,
) -> None:
    """The store failing on completion: the caller gets the result; the record stays claimed."""
    store = SpyStore(idempotency_store, fail={"complete"})
    runs = Runs()
    handler = make_handler(mode, store, IdempotencyConfig(decision_hook=decisions), runs)

    result = mode.call(handler, EVENT, FakeLambdaContext(10_000, clock=idempotency_clock))

    record = idempotency_store.get(key_of(EVENT))
    assert record is not None
    assert {"order_id": 7, "run": 1} == result
    assert Status.IN_PROGRESS == record.status
    assert ["COMPLETE_FAILED"] == decisions.outcomes


def test_after_a_failed_completion_duplicates_wait_for_the_lease_then_run_again(
    mode: Mode, idempotency_clock: ManualClock, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """Duplicates see in-progress until the stuck lease ends, then the body runs again."""
    failing = SpyStore(idempotency_store, fail={"complete"})
    runs = Runs()
    stuck = make_handler(mode, failing, runs=runs)
    mode.call(stuck, EVENT, FakeLambdaContext(10_000, clock=idempotency_clock))
    handler = make_handler(mode, idempotency_store, runs=runs)

    idempotency_clock.advance(9)
    with pytest.raises(IdempotencyAlreadyInProgressError):
        mode.call(handler, EVENT, FakeLambdaContext(10_000, clock=idempotency_clock))
    idempotency_clock.advance(2.001)
    result = mode.call(handler, EVENT, FakeLambdaContext(10_000, clock=idempotency_clock))

    assert {"order_id": 7, "run": 2} == result
    assert 2 == runs.count


def test_live_in_progress_record_raises_with_the_lease_end(
    mode: Mode,
    idempotency_clock: ManualClock,
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
) -> None:
    """A key held by a live invocation raises in-progress, telling when the lease ends."""
    lease_end = idempotency_clock.now_ms() + 20_000
    hold(idempotency_store, key_of(EVENT), lease_end_ms=lease_end)
    runs = Runs()
    handler = make_handler(
        mode, idempotency_store, IdempotencyConfig(decision_hook=decisions), runs
    )

    with pytest.raises(IdempotencyAlreadyInProgressError) as raised:
        mode.call(handler, EVENT, lambda_context)

    assert lease_end == raised.value.lease_expires_at_ms
    assert 0 == runs.count
    assert ["IN_PROGRESS"] == decisions.outcomes


def test_duplicate_inside_the_running_body_is_refused(
    mode: Mode, idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """While the body runs its own key is IN_PROGRESS: a re-entrant duplicate is refused."""
    refused: list[BaseException] = []

    def body(event: dict[str, Any], context: Any) -> str:
        if event.get("nested"):
            return "inner"
        try:
            mode.call(handler, event, context)
        except IdempotencyAlreadyInProgressError as exc:
            refused.append(exc)
        return "outer"

    handler = mode.wrap(idempotent(persistence_store=idempotency_store, key_prefix=PREFIX), body)

    assert "outer" == mode.call(handler, EVENT, lambda_context)
    assert 1 == len(refused)


def test_lease_is_the_remaining_time_of_the_lambda_context(
    mode: Mode, idempotency_clock: ManualClock, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """With a context the lease ends when the invocation must end (at most 1 s earlier)."""
    store = SpyStore(idempotency_store)
    context = FakeLambdaContext(12_345, clock=idempotency_clock)

    handler = make_handler(mode, store, IdempotencyConfig(in_progress_expiry_seconds=60))
    mode.call(handler, EVENT, context)

    deadline = idempotency_clock.now_ms() + 12_345
    margin = deadline - lease_end_ms(store.claims[0])
    assert 0 <= margin <= 1000


@pytest.mark.parametrize(("in_progress_expiry_seconds", "lease_seconds"), [(None, 900), (120, 120)])
def test_lease_without_a_context_is_in_progress_expiry_seconds(
    mode: Mode,
    idempotency_clock: ManualClock,
    idempotency_store: InMemoryPersistenceLayer,
    in_progress_expiry_seconds: int | None,
    lease_seconds: int,
) -> None:
    """Without a context the lease is ``in_progress_expiry_seconds``, by default 900 s."""
    store = SpyStore(idempotency_store)
    config = IdempotencyConfig(in_progress_expiry_seconds=in_progress_expiry_seconds)

    mode.call(make_handler(mode, store, config), EVENT, None)

    expected = idempotency_clock.now_ms() + lease_seconds * 1000
    assert expected == store.claims[0].in_progress_expiry_timestamp


def test_completed_record_expires_after_expires_after_seconds(
    mode: Mode,
    idempotency_clock: ManualClock,
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
) -> None:
    """A result is replayed until ``expires_after_seconds`` have passed, then the body runs."""
    runs = Runs()
    handler = make_handler(
        mode, idempotency_store, IdempotencyConfig(expires_after_seconds=60), runs
    )

    mode.call(handler, EVENT, lambda_context)
    idempotency_clock.advance(60)
    replayed = mode.call(handler, EVENT, FakeLambdaContext(clock=idempotency_clock))
    idempotency_clock.advance(1)
    fresh = mode.call(handler, EVENT, FakeLambdaContext(clock=idempotency_clock))

    assert {"order_id": 7, "run": 1} == replayed
    assert {"order_id": 7, "run": 2} == fresh


def test_passed_lease_is_taken_over_and_the_old_owner_is_fenced(
    mode: Mode,
    idempotency_clock: ManualClock,
    idempotency_store: InMemoryPersistenceLayer,
    decisions: Decisions,
) -> None:
    """A newer call takes over a passed lease; the old owner's completion cannot overwrite it."""
    config = IdempotencyConfig(decision_hook=decisions)

    def body(event: dict[str, Any], context: Any) -> str:
        if context.function_name == "slow":
            idempotency_clock.advance(ms=5_000 + CLOCK_SKEW_TOLERANCE_MS + 1)
            newer = mode.call(handler, event, FakeLambdaContext(10_000, clock=idempotency_clock))
            assert "fast result" == newer
            return "slow result"
        return "fast result"

    handler = mode.wrap(
        idempotent(persistence_store=idempotency_store, config=config, key_prefix=PREFIX), body
    )

    slow = FakeLambdaContext(5_000, clock=idempotency_clock, function_name="slow")
    own = mode.call(handler, EVENT, slow)
    replay = mode.call(handler, EVENT, FakeLambdaContext(clock=idempotency_clock))

    assert "slow result" == own
    assert "fast result" == replay
    assert ["TAKEN_OVER", "LEASE_LOST", "REPLAYED"] == decisions.outcomes


def test_old_owner_that_raises_after_a_takeover_leaves_the_newer_record(
    mode: Mode,
    idempotency_clock: ManualClock,
    idempotency_store: InMemoryPersistenceLayer,
    decisions: Decisions,
) -> None:
    """An old owner failing after being taken over does not delete the newer owner's record."""
    config = IdempotencyConfig(decision_hook=decisions)

    def body(event: dict[str, Any], context: Any) -> str:
        if context.function_name == "slow":
            idempotency_clock.advance(ms=5_000 + CLOCK_SKEW_TOLERANCE_MS + 1)
            mode.call(handler, event, FakeLambdaContext(10_000, clock=idempotency_clock))
            raise TimeoutError("too slow")
        return "fast result"

    handler = mode.wrap(
        idempotent(persistence_store=idempotency_store, config=config, key_prefix=PREFIX), body
    )

    with pytest.raises(TimeoutError):
        mode.call(
            handler, EVENT, FakeLambdaContext(5_000, clock=idempotency_clock, function_name="slow")
        )

    record = idempotency_store.get(key_of(EVENT))
    assert record is not None
    assert Status.COMPLETED == record.status
    assert "fast result" == record.response_json_as_dict()
    assert ["TAKEN_OVER", "LEASE_LOST"] == decisions.outcomes


def test_lease_must_be_passed_by_the_clock_skew_tolerance(
    mode: Mode,
    idempotency_clock: ManualClock,
    idempotency_store: InMemoryPersistenceLayer,
    decisions: Decisions,
) -> None:
    """A lease that ended less than CLOCK_SKEW_TOLERANCE_MS ago is still live; 1 ms more is not."""
    lease_end = idempotency_clock.now_ms() + 5_000
    hold(idempotency_store, key_of(EVENT), lease_end_ms=lease_end)
    runs = Runs()
    handler = make_handler(
        mode, idempotency_store, IdempotencyConfig(decision_hook=decisions), runs
    )

    idempotency_clock.set(lease_end + CLOCK_SKEW_TOLERANCE_MS)
    with pytest.raises(IdempotencyAlreadyInProgressError):
        mode.call(handler, EVENT, FakeLambdaContext(clock=idempotency_clock))
    idempotency_clock.advance(ms=1)
    mode.call(handler, EVENT, FakeLambdaContext(clock=idempotency_clock))

    assert 1000 <= CLOCK_SKEW_TOLERANCE_MS
    assert 1 == runs.count
    assert ["IN_PROGRESS", "TAKEN_OVER"] == decisions.outcomes


def test_in_progress_record_without_a_lease_is_live_until_it_expires(
    mode: Mode, idempotency_clock: ManualClock, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """An IN_PROGRESS record with no lease end blocks duplicates until its expiration."""
    now = idempotency_clock.now_ms()
    record = IdempotencyRecord(
        idempotency_key=key_of(EVENT),
        status=Status.IN_PROGRESS,
        expiry_timestamp=now // 1000 + 100,
        owner="legacy",
    )
    idempotency_store.claim(record, now_ms=now, lease_cutoff_ms=now)
    runs = Runs()
    handler = make_handler(mode, idempotency_store, runs=runs)

    idempotency_clock.advance(100)
    with pytest.raises(IdempotencyAlreadyInProgressError):
        mode.call(handler, EVENT, FakeLambdaContext(clock=idempotency_clock))
    idempotency_clock.advance(1)
    mode.call(handler, EVENT, FakeLambdaContext(clock=idempotency_clock))

    assert 1 == runs.count


def test_validation_mismatch_raises_and_does_not_run(
    mode: Mode,
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
) -> None:
    """Same key with a different validated part raises `IdempotencyValidationError`."""
    config = IdempotencyConfig(
        event_key_jmespath="order_id",
        payload_validation_jmespath="amount",
        decision_hook=decisions,
    )
    runs = Runs()
    handler = make_handler(mode, idempotency_store, config, runs)

    mode.call(handler, {"order_id": 7, "amount": 10, "note": "a"}, lambda_context)
    replay = mode.call(handler, {"order_id": 7, "amount": 10, "note": "b"}, lambda_context)
    with pytest.raises(IdempotencyValidationError):
        mode.call(handler, {"order_id": 7, "amount": 11}, lambda_context)

    assert {"order_id": 7, "run": 1} == replay
    assert 1 == runs.count
    assert ["CLAIMED", "REPLAYED", "VALIDATION_FAILED"] == decisions.outcomes


def test_validation_also_applies_to_a_duplicate_of_a_running_call(
    mode: Mode, idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A different payload under a key that is in progress is a validation error, too."""
    config = IdempotencyConfig(event_key_jmespath="order_id", payload_validation_jmespath="amount")
    seen: list[BaseException] = []

    def body(event: dict[str, Any], context: Any) -> str:
        if event["amount"] == 10:
            try:
                mode.call(handler, {"order_id": event["order_id"], "amount": 99}, context)
            except IdempotencyValidationError as exc:
                seen.append(exc)
        return "ok"

    handler = mode.wrap(
        idempotent(persistence_store=idempotency_store, config=config, key_prefix=PREFIX), body
    )

    mode.call(handler, {"order_id": 7, "amount": 10}, lambda_context)

    assert 1 == len(seen)


def test_store_failure_on_claim_raises_and_does_not_run(
    mode: Mode,
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
) -> None:
    """The store failing on the claim raises `IdempotencyPersistenceLayerError`; no body run."""
    store = SpyStore(idempotency_store, fail={"claim"})
    runs = Runs()
    handler = make_handler(mode, store, IdempotencyConfig(decision_hook=decisions), runs)

    with pytest.raises(IdempotencyPersistenceLayerError) as raised:
        mode.call(handler, EVENT, lambda_context)

    assert "StoreDownError" == type(raised.value.__cause__).__name__
    assert 0 == runs.count
    assert ["STORE_ERROR"] == decisions.outcomes


class AppliedClaimStore(SpyStore):
    """A spy store whose claim is written, then answered with a store error (a lost reply)."""

    def claim(self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int) -> Any:
        self.inner.claim(record, now_ms=now_ms, lease_cutoff_ms=lease_cutoff_ms)
        self.fail.add("claim")
        return super().claim(record, now_ms=now_ms, lease_cutoff_ms=lease_cutoff_ms)


def test_a_claim_written_but_failed_is_released_then_raised(
    mode: Mode,
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
) -> None:
    """The store error of a claim it applied anyway: the claim is released by its owner token
    before the error is raised, so the next call runs (and is not refused as in progress)."""
    store = AppliedClaimStore(idempotency_store)
    runs = Runs()
    handler = make_handler(mode, store, IdempotencyConfig(decision_hook=decisions), runs)

    with pytest.raises(IdempotencyPersistenceLayerError):
        mode.call(handler, EVENT, lambda_context)
    assert (0, 0, ["STORE_ERROR"]) == (runs.count, len(idempotency_store), decisions.outcomes)
    assert 1 == store.calls["release"]

    store.fail.clear()
    mode.call(make_handler(mode, idempotency_store, runs=runs), EVENT, lambda_context)
    assert 1 == runs.count


def test_a_failed_undo_of_a_claim_is_logged_and_noted(
    mode: Mode,
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
) -> None:
    """If the release that undoes a failed claim fails too, the claim's error is raised with a
    note, RELEASE_FAILED follows STORE_ERROR, and the record waits for its lease to end."""
    store = AppliedClaimStore(idempotency_store, fail={"release"})
    handler = make_handler(mode, store, IdempotencyConfig(decision_hook=decisions), Runs())

    with pytest.raises(IdempotencyPersistenceLayerError, match="claim failed") as raised:
        mode.call(handler, EVENT, lambda_context)

    assert ["STORE_ERROR", "RELEASE_FAILED"] == decisions.outcomes
    assert any("undoing the claim failed" in note for note in raised.value.__notes__)
    assert 1 == len(idempotency_store)


def test_a_configuration_error_on_the_claim_is_not_undone(
    mode: Mode, lambda_context: FakeLambdaContext, decisions: Decisions
) -> None:
    """A store that cannot be configured (no region, say) wrote nothing: no release is sent."""

    class Misconfigured(SpyStore):
        def claim(self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int) -> Any:
            self.calls["claim"] += 1
            raise IdempotencyPersistenceConfigError("no AWS region: set AWS_REGION")

    store = Misconfigured(InMemoryPersistenceLayer())
    handler = make_handler(mode, store, IdempotencyConfig(decision_hook=decisions), Runs())

    with pytest.raises(IdempotencyPersistenceConfigError):
        mode.call(handler, EVENT, lambda_context)
    assert {"claim": 1} == dict(store.calls)
    assert ["STORE_ERROR"] == decisions.outcomes


def test_store_calls_per_path(
    mode: Mode, idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """First call: claim + complete; replay: one claim; handler raised: claim + release."""
    store = SpyStore(idempotency_store)
    handler = make_handler(mode, store)

    mode.call(handler, EVENT, lambda_context)
    first = dict(store.calls)
    store.calls.clear()
    mode.call(handler, EVENT, lambda_context)
    replay = dict(store.calls)
    store.calls.clear()
    with pytest.raises(KeyError):
        mode.call(handler, {"no order id": True}, lambda_context)
    raised = dict(store.calls)

    assert {"claim": 1, "complete": 1} == first
    assert {"claim": 1} == replay
    assert {"claim": 1, "release": 1} == raised


def test_decisions_carry_the_hashed_key_and_store_calls(
    mode: Mode,
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
) -> None:
    """The decision hook gets one decision per call with the key and the round trips."""
    handler = make_handler(mode, idempotency_store, IdempotencyConfig(decision_hook=decisions))

    mode.call(handler, EVENT, lambda_context)
    mode.call(handler, EVENT, lambda_context)

    first, second = decisions.items
    assert ("CLAIMED", key_of(EVENT), 2) == (first.outcome.value, first.key, first.store_calls)
    assert ("REPLAYED", key_of(EVENT), 1) == (second.outcome.value, second.key, second.store_calls)
    assert "store" == second.source
    assert first.handler_ms is not None
    assert second.handler_ms is None


def test_a_failing_decision_hook_does_not_break_the_call(
    mode: Mode, idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Exceptions raised by the decision hook are logged and swallowed."""

    def broken_hook(decision: object) -> None:
        raise RuntimeError("metrics backend down")

    handler = make_handler(mode, idempotency_store, IdempotencyConfig(decision_hook=broken_hook))

    assert {"order_id": 7, "run": 1} == mode.call(handler, EVENT, lambda_context)


def test_response_hook_runs_on_replays_only(
    mode: Mode, idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """``response_hook(response, record)`` shapes replayed responses, never the first one."""
    calls: list[tuple[Any, IdempotencyRecord]] = []

    def hook(response: dict[str, Any], record: IdempotencyRecord) -> dict[str, Any]:
        calls.append((response, record))
        return {**response, "replayed": True}

    handler = make_handler(mode, idempotency_store, IdempotencyConfig(response_hook=hook))

    first = mode.call(handler, EVENT, lambda_context)
    second = mode.call(handler, EVENT, lambda_context)

    assert {"order_id": 7, "run": 1} == first
    assert {"order_id": 7, "run": 1, "replayed": True} == second
    assert 1 == len(calls)
    assert key_of(EVENT) == calls[0][1].idempotency_key
    assert Status.COMPLETED == calls[0][1].status
    assert calls[0][1].get_expiration_datetime() is not None


def test_handler_arguments_may_be_passed_by_keyword(
    mode: Mode, idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """``mode.call(handler, event=..., context=...)`` is keyed like the positional call."""
    runs = Runs()
    handler = make_handler(mode, idempotency_store, runs=runs)

    mode.call(handler, EVENT, lambda_context)
    mode.call(handler, event=EVENT, context=lambda_context)

    assert 1 == runs.count
