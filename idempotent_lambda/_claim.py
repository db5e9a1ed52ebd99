"""The claim loop: take an invocation's key, wait on a live holder, or find the result to replay.

`claim` is a generator like the rest of the state machine (`idempotent_lambda._engine`): it
yields the store calls and pauses of `idempotent_lambda._recording.Recorder` and returns a
`Claim`, which says whether the key is held (the body may run) or which record to replay.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any, NamedTuple, NoReturn

from idempotent_lambda._effects import Effect, Pause
from idempotent_lambda._identity import Invocation
from idempotent_lambda._observability import Outcome, Tally, cause_name
from idempotent_lambda._recording import WAIT_DEADLINE_MARGIN_MS, Recorder, add_note
from idempotent_lambda.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyConfigError,
    IdempotencyKeySchemaError,
    IdempotencyPersistenceLayerError,
    IdempotencyWriteConflictError,
)
from idempotent_lambda.persistence.protocol import ClaimOutcome
from idempotent_lambda.record import IdempotencyRecord, Status

#: A lease counts as passed only once it ended this long ago on the claimer's clock, so an
#: instance whose clock runs ahead by up to this much cannot take over a live invocation.
CLOCK_SKEW_TOLERANCE_MS = 1000
#: Polling while waiting for an in-progress duplicate: first pause, growth factor, longest pause.
_WAIT_FIRST_S, _WAIT_FACTOR, _WAIT_MAX_S = 0.02, 1.5, 0.5
#: Bound on claim attempts in one invocation (each retry follows a release or a lease end).
_MAX_CLAIM_ATTEMPTS = 50


class Claim(NamedTuple):
    """How the claim loop ended: the key held by ``inv``, or a COMPLETED record to replay.

    ``inv`` is the invocation that holds the key; its owner is None when it adopted the
    unowned claim Powertools takes for a durable handler. ``took_over`` says a previous
    holder's lease had passed. ``replay`` is the record to replay instead of running the body,
    and ``source`` where it came from (``store`` or ``wait``).
    """

    inv: Invocation
    took_over: bool = False
    replay: IdempotencyRecord | None = None
    source: str = "store"


def claim(recorder: Recorder, inv: Invocation, tally: Tally) -> Generator[Effect, Any, Claim]:
    """Claim the key of ``inv``; on a refusal, replay the holder's result or wait for it.

    Raises:
        IdempotencyAlreadyInProgressError: A live holder kept the key past the wait.
        IdempotencyValidationError: The stored record is of another payload.
        IdempotencyKeySchemaError: The store answered with another key's record.
        IdempotencyPersistenceLayerError: The claim failed (what it may have written is
            released), or the store refused every claim without a live holder.
    """
    source = "store"
    now = inv.now_ms
    for _attempt in range(_MAX_CLAIM_ATTEMPTS):
        outcome = yield from _claim_once(recorder, inv, tally, now)
        existing = outcome.previous
        if existing is not None and existing.idempotency_key != inv.key:
            yield from _refuse_other_key(recorder, inv, tally, "claim", held=outcome.claimed)
        if outcome.claimed:
            return Claim(inv, took_over=existing is not None and not existing.expired_at(now))
        if _is_own_claim(existing, inv):
            # Our claim was written but its answer was lost (a timeout or 5xx after the
            # write), and the client's retry met our own record; or a durable execution's
            # replay met the claim an earlier invocation of it took: the key is ours.
            if existing is not None and existing.owner is None:
                inv = inv._replace(owner=None)  # complete and release as Powertools would
            return Claim(inv)
        if existing is not None:
            recorder.validate(existing, inv, tally)
            if existing.status is Status.COMPLETED:
                if recorder.cache is not None:
                    recorder.cache.put(existing)
                return Claim(inv, replay=existing, source=source)
        existing = yield from _wait(recorder, inv, tally, existing)
        if existing is not None:
            recorder.validate(existing, inv, tally)
            return Claim(inv, replay=existing, source="wait")
        source = "wait"  # the holder released or its lease passed: claim again
        now = recorder.store.clock.now_ms()
    raise IdempotencyPersistenceLayerError(
        f"the store refused {_MAX_CLAIM_ATTEMPTS} claims in a row without a live holder"
    )


def _claim_once(
    recorder: Recorder, inv: Invocation, tally: Tally, now: int
) -> Generator[Effect, Any, ClaimOutcome]:
    """Yield one claim of the key as of ``now``; a failed one is undone before it is raised.

    A replicated write conflict that outlasts the retries reads the record instead, and answers
    as to a duplicate of the other Region's claim.
    """
    store = recorder.store
    record = IdempotencyRecord(
        inv.key,
        Status.IN_PROGRESS,
        inv.expiry_seconds(now, recorder.config.expires_after_seconds),
        inv.lease_end_ms,
        None,
        inv.payload_hash,
        inv.owner,
    )
    try:
        outcome: ClaimOutcome = yield from recorder.call(
            tally,
            "claim",
            store.claim,
            record,
            now_ms=now,
            lease_cutoff_ms=now - CLOCK_SKEW_TOLERANCE_MS,
            report_errors=False,
            deadline_ms=inv.deadline_ms,
        )
    except IdempotencyWriteConflictError as exc:
        existing = yield from recorder.call(tally, "get", store.get, inv.key)
        if existing is None or existing.expired_at(store.clock.now_ms()):
            tally.report(Outcome.IN_PROGRESS, error=cause_name(exc), op="claim")
            raise IdempotencyAlreadyInProgressError(
                "another Region is writing this idempotency key (a replicated write "
                "conflict outlasted the retries); retry the request"
            ) from exc
        return ClaimOutcome(claimed=False, previous=existing)
    except IdempotencyPersistenceLayerError as exc:
        yield from _undo_claim(recorder, inv, tally, exc)
        raise
    return outcome


def _undo_claim(
    recorder: Recorder, inv: Invocation, tally: Tally, error: IdempotencyPersistenceLayerError
) -> Generator[Effect, Any, None]:
    """Release whatever the failed claim may have written, then report the STORE_ERROR.

    The claim can fail after the store applied it (a Redis timeout or failover after the
    script ran, DynamoDB once botocore's retries are spent). Left in place, this
    invocation's own record would refuse every retry until its lease ends, with nothing
    running. The release is fenced on this invocation's owner token, so it deletes that
    record if it was written and nothing otherwise. A configuration or key schema error
    wrote nothing, and a release would fail the same way: it is not tried. A failed
    release is logged (RELEASE_FAILED) and noted on ``error``.
    """
    failed: IdempotencyPersistenceLayerError | None = None
    if not isinstance(error, IdempotencyConfigError | IdempotencyKeySchemaError):
        try:
            yield from recorder.call(
                tally, "release", recorder.store.release, inv.key, inv.owner, report_errors=False
            )
        except IdempotencyPersistenceLayerError as exc:
            failed = exc
            add_note(error, f"idempotent_lambda: undoing the claim failed too: {exc}")
    tally.report(Outcome.STORE_ERROR, error=cause_name(error), op="claim")
    if failed is not None:
        tally.report(Outcome.RELEASE_FAILED, error=cause_name(failed))


def _wait(
    recorder: Recorder, inv: Invocation, tally: Tally, holder: IdempotencyRecord | None
) -> Generator[Effect, Any, IdempotencyRecord | None]:
    """Poll until the holder completes (return its record) or gives the key up (None).

    The holder the refused claim reported counts as live until its lease ends, even while a
    read shows an older record: on Redis in Powertools' layout, a caller that holds the
    orphan lock is taking over a record that still reads as abandoned (or expired).

    Raises `IdempotencyAlreadyInProgressError` when waiting is off or its budget runs out.
    """
    clock = recorder.store.clock
    started = clock.now_ms()
    wait_s = recorder.config.wait_for_in_progress_seconds
    # Infinite: as long as this invocation's own claim would last (its deadline, with a
    # context); a waiter must never outlive the lease it would hold itself.
    budget_end = inv.lease_end_ms if math.isinf(wait_s) else started + int(wait_s * 1000)
    if inv.deadline_ms is not None:
        budget_end = min(budget_end, inv.deadline_ms - WAIT_DEADLINE_MARGIN_MS)
    reported = holder if holder is not None and holder.status is Status.IN_PROGRESS else None
    pause = _WAIT_FIRST_S
    paused_ms = 0.0
    while holder is not None:
        now = clock.now_ms()
        in_progress = holder.status is Status.IN_PROGRESS
        if not in_progress and not holder.expired_at(now):
            return holder
        cutoff = now - CLOCK_SKEW_TOLERANCE_MS
        if (reported is None or reported.lease_passed(cutoff)) and (
            not in_progress or holder.lease_passed(cutoff)
        ):
            return None
        # The pauses count too, so the budget runs out even on a clock that stands still
        # or jumps back (a test's ManualClock): waiting never turns into a hang.
        if max(now, started + paused_ms) + pause * 1000 > budget_end:
            tally.report(Outcome.IN_PROGRESS)
            raise IdempotencyAlreadyInProgressError(
                "another invocation is processing this idempotency key",
                lease_expires_at_ms=_lease_end(holder if in_progress else None, reported),
            )
        yield Pause(pause)
        paused_ms += pause * 1000
        pause = min(pause * _WAIT_FACTOR, _WAIT_MAX_S)
        holder = yield from recorder.call(tally, "get", recorder.store.get, inv.key)
        if holder is not None and holder.idempotency_key != inv.key:
            yield from _refuse_other_key(recorder, inv, tally, "get", held=False)
    return None


def _refuse_other_key(
    recorder: Recorder, inv: Invocation, tally: Tally, operation: str, *, held: bool
) -> Generator[Effect, Any, NoReturn]:
    """Raise `IdempotencyKeySchemaError`: the store answered with another key's record.

    Such a record says nothing about this key (a table keyed differently from its store
    puts every key on one item), so it is neither replayed nor waited on. A claim written
    over it (``held``) is released first.
    """
    error = IdempotencyKeySchemaError(
        "the store answered with the record of another idempotency key: it is not keyed "
        "the way it was configured (for DynamoDB, key_attr and sort_key_attr must name the "
        "table's partition and sort key); nothing was replayed and the function did not run"
    )
    tally.report(Outcome.STORE_ERROR, error=type(error).__name__, op=operation)
    if held:
        yield from recorder.release(inv, tally, error)
    raise error


def _is_own_claim(record: IdempotencyRecord | None, inv: Invocation) -> bool:
    """Tell whether a record that blocked a claim is this invocation's own IN_PROGRESS claim."""
    if record is None or record.status is not Status.IN_PROGRESS:
        return False
    return record.owner == inv.owner or (inv.adopts_unowned and record.owner is None)


def _lease_end(*holders: IdempotencyRecord | None) -> int | None:
    """Return the latest lease end among ``holders`` (None when none has one)."""
    ends = [h.in_progress_expiry_timestamp for h in holders if h is not None]
    known = [end for end in ends if end is not None]
    return max(known) if known else None
