"""The record state machine of one decorated function, read top to bottom.

`IdempotentFunction.flow` is a generator that describes one invocation: it yields effects (a
store call, a pause, running the body) and gets their outcomes back; the drivers in
`idempotent_lambda._effects` carry them out, in the caller's thread (`run_sync`) or on its event
loop (`run_async`). Every rule here (fencing, waiting, takeover, release, transactions,
unstorable results) is a run of store calls with decisions between them that do not depend on
how a call is awaited, so each is written once for `def` and `async def` functions alike.

In reading order: `call`/`acall` → `enter` → `flow` (local cache, claim, `_wait`) →
`_run_and_record` (`_complete`, `_commit` or `_release`) → `_replay`.
"""

from __future__ import annotations

import functools
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Generator, Sequence
from time import perf_counter
from typing import Any, NoReturn, TypeVar

from idempotent_lambda._durable_context import (
    DURABLE_LEASE_SECONDS,
    DurableRun,
    durable_run_of,
    enter_durable,
    hold_release,
    in_durable,
    keeps_claim,
    leave_durable,
)
from idempotent_lambda._effects import RUN_BODY, Effect, Flow, Pause, StoreCall, run_async, run_sync
from idempotent_lambda._identity import Derive, Invocation, key_source_of
from idempotent_lambda._lambda_context import (
    as_lambda_context,
    current_lambda_context,
    start_running,
    stop_running,
    with_time_left,
)
from idempotent_lambda._observability import (
    Outcome,
    Reporter,
    Tally,
    cause_name,
    requests_of_context,
)
from idempotent_lambda._tracing import traced
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyConfigError,
    IdempotencyKeySchemaError,
    IdempotencyPersistenceLayerError,
    IdempotencyTransactionError,
    IdempotencyUnstorableResultError,
    IdempotencyValidationError,
    IdempotencyWriteConflictError,
)
from idempotent_lambda.persistence.protocol import (
    ClaimOutcome,
    PersistenceStore,
    TransactItem,
    transactional,
)
from idempotent_lambda.record import IdempotencyRecord, Status
from idempotent_lambda.transaction import close_transaction, open_transaction

T = TypeVar("T")

#: A lease counts as passed only once it ended this long ago on the claimer's clock, so an
#: instance whose clock runs ahead by up to this much cannot take over a live invocation.
CLOCK_SKEW_TOLERANCE_MS = 1000
#: Polling while waiting for an in-progress duplicate: first pause, growth factor, longest pause.
_WAIT_FIRST_S, _WAIT_FACTOR, _WAIT_MAX_S = 0.02, 1.5, 0.5
#: A waiter gives up this long before its own deadline, to leave time to answer.
_WAIT_DEADLINE_MARGIN_MS = 200
#: Pauses between the attempts of a write that met another Region's write of the same item
#: (a global table's ReplicatedWriteConflictException): contention that clears in milliseconds.
_CONFLICT_PAUSES_S = (0.025, 0.05, 0.1, 0.2)
#: Bound on claim attempts in one invocation (each retry follows a release or a lease end).
_MAX_CLAIM_ATTEMPTS = 50
_DISABLE_VARIABLES = ("IDEMPOTENCY_DISABLED", "POWERTOOLS_IDEMPOTENCY_DISABLED")
_TRUTHY = frozenset({"1", "true", "yes", "on", "y", "t"})


def idempotency_disabled() -> bool:
    """Tell whether ``IDEMPOTENCY_DISABLED`` (or Powertools' variable) switches idempotency off."""
    for name in _DISABLE_VARIABLES:
        value = os.environ.get(name)
        if value and value.strip().lower() in _TRUTHY:
            return True
    return False


class IdempotentFunction:
    """Everything one decorated function needs across its invocations.

    Args:
        store: Where records live: the store's view for ``config.record_format``
            (`idempotent_lambda._entry.Entry.view`).
        config: The function's settings.
        function_name: Named in log lines and decisions.
        serializer: The ``to_dict``/``from_dict`` pair results are stored and rebuilt with.
        store_result_if: Adapters' filter: a result it rejects is not stored and the record is
            released (an HTTP 5xx, say), so a retry runs the body again.
        on_replay: Adapters' hook, applied to replayed results after ``config.response_hook``.
        key_source: What reads the key, named when it finds none (default: `key_source_of`).
        execution: The durable execution every call belongs to (a durable step's), if any.
        span_name: What a call's span is named after (``idempotency <span_name>``); the
            function's name when None.
        key_prefix: What gives the function's key prefix: a body run without a record writes
            its outbox events under it (inside the function's grant).
    """

    def __init__(
        self,
        *,
        store: PersistenceStore,
        config: IdempotencyConfig,
        function_name: str,
        serializer: Any,
        store_result_if: Callable[[Any], bool] | None = None,
        on_replay: Callable[[Any, IdempotencyRecord], Any] | None = None,
        key_source: str | None = None,
        execution: str | None = None,
        span_name: str | None = None,
        key_prefix: Callable[[], str] | None = None,
    ) -> None:
        self.store = store
        self.key_prefix = key_prefix
        self.config = config
        self.function_name = function_name
        self.span_name = span_name or function_name
        self.cache = LocalCache(config.local_cache_max_items) if config.use_local_cache else None
        self.reporter = Reporter(function_name, config.decision_hook, config.logger, execution)
        self._to_dict = serializer.to_dict
        self._from_dict = serializer.from_dict
        self._store_result_if = store_result_if
        self._on_replay = on_replay
        self.key_source = key_source or key_source_of(config)

    # --- Entry: bind the context, derive the invocation ---

    def call(
        self,
        context: Any,
        derive: Derive | None,
        body: Callable[[], T],
        *,
        known: IdempotencyRecord | None = None,
        carrier: Any = None,
    ) -> T:
        """Carry out one call of a ``def`` function in this thread (see `enter`)."""
        return run_sync(self.enter(context, derive, known, carrier=carrier), body)

    async def acall(
        self,
        context: Any,
        derive: Derive | None,
        body: Callable[[], Awaitable[T]],
        *,
        known: IdempotencyRecord | None = None,
        carrier: Any = None,
    ) -> T:
        """Carry out one call of an ``async def`` function on the event loop (see `enter`)."""
        return await run_async(self.enter(context, derive, known, carrier=carrier), body)

    def enter(
        self,
        context: Any,
        derive: Derive | None,
        known: IdempotencyRecord | None = None,
        *,
        carrier: Any = None,
    ) -> Flow:
        """Describe one call (see `_enter`), in a span of its own when OpenTelemetry traces.

        ``carrier`` is the payload, read for the trace context an outbox event carries. A call
        left alone (``derive`` None) runs as if undecorated: no span.
        """
        flow = self._enter(context, derive, known)
        if derive is None:
            return flow
        return traced(
            flow,
            self.function_name,
            self.config.record_format,
            name=self.span_name,
            carrier=carrier,
        )

    def _enter(
        self, context: Any, derive: Derive | None, known: IdempotencyRecord | None = None
    ) -> Flow:
        """Bind ``context`` for the call, then run `flow`, or the body `unrecorded`.

        Binding first lets nested idempotent functions see the context, and gives ``derive``
        the one whose remaining time is the lease. ``derive`` None leaves the call alone;
        ``known`` is the key's record as a batch just read it (see `flow`).
        """
        durable = durable_run_of(context)
        scope = None
        if durable is not None:
            scope = enter_durable(context)  # which errors keep the claim: see keeps_claim
            context = durable.lambda_context
        own = as_lambda_context(context)
        seen = current_lambda_context.get()
        token = current_lambda_context.set(own or seen)
        if own is not None:
            start_running(own)
        bound = own or with_time_left(seen)
        try:
            invocation = None
            if derive is not None:
                if idempotency_disabled():
                    self.note(Outcome.DISABLED)
                else:
                    invocation = derive(bound or self.config.bound_context())
                    if invocation is None:
                        self.reporter.note(Outcome.SKIPPED, self.key_source)
                    elif durable is not None:
                        invocation = self._durable(invocation, durable)
            if invocation is None:
                return (yield from self.unrecorded())
            return (yield from self.flow(invocation, known))
        finally:
            current_lambda_context.reset(token)
            if own is not None:
                stop_running(own)
            if scope is not None:
                leave_durable(scope)

    def _durable(self, inv: Invocation, durable: DurableRun) -> Invocation:
        """Make ``inv`` the claim of a durable execution rather than of one invocation.

        Every invocation of the execution claims with one owner token, so a replay meets its
        own claim and goes on, and another execution does not. The lease is the longest a
        durable execution can run, or ``in_progress_expiry_seconds`` when that is set: a
        suspended execution holds the key while no invocation runs. A replay also adopts an
        unowned claim, the one Powertools takes for a durable handler.
        """
        lease_s = self.config.in_progress_expiry_seconds or DURABLE_LEASE_SECONDS
        return inv._replace(
            owner=durable.owner,
            lease_end_ms=inv.now_ms + lease_s * 1000,
            adopts_unowned=durable.replaying,
        )

    def note(self, outcome: Outcome) -> None:
        """Report a decision about a call that has no invocation (DISABLED, SKIPPED)."""
        self.reporter.note(outcome)

    def unrecorded(self) -> Flow:
        """Run the body without a record, then commit its queued writes (if any) atomically.

        A result the adapter would not store (``store_result_if``) discards them, as it would
        if the call were recorded.
        """
        prefix = self.key_prefix() if self.key_prefix is not None else None
        binding = open_transaction(self.store, key_prefix=prefix)
        try:
            result = yield RUN_BODY
        finally:
            writes = close_transaction(binding)
        if writes and (self._store_result_if is None or self._store_result_if(result)):
            yield StoreCall(transactional(self.store).write_transaction, (writes,), {})
        return result

    # --- Claim and wait ---

    def flow(self, inv: Invocation, known: IdempotencyRecord | None = None) -> Flow:
        """Describe one invocation: replay, wait, refuse, or claim, run the body and record it.

        ``known`` (the key's record, read just before) is replayed only when it is COMPLETED
        and live; anything else goes through the claim, whose condition decides.
        """
        tally = self.reporter.tally(inv.key)
        store, cache = self.store, self.cache
        if cache is not None:
            cached = cache.get(inv.key, store.clock.now_ms())
            if cached is not None:
                self._validate(cached, inv, tally)
                return self._replay(cached, tally, "cache")
        if (
            known is not None
            and known.status is Status.COMPLETED
            and known.idempotency_key == inv.key
            and not known.expired_at(inv.now_ms)
        ):
            self._validate(known, inv, tally)
            if cache is not None:
                cache.put(known)
            return self._replay(known, tally, "batch_read")

        previous: IdempotencyRecord | None = None
        source = "store"
        now = inv.now_ms
        for _attempt in range(_MAX_CLAIM_ATTEMPTS):
            claim = IdempotencyRecord(
                inv.key,
                Status.IN_PROGRESS,
                inv.expiry_seconds(now, self.config.expires_after_seconds),
                inv.lease_end_ms,
                None,
                inv.payload_hash,
                inv.owner,
            )
            try:
                outcome = yield from self._store(
                    tally,
                    "claim",
                    store.claim,
                    claim,
                    now_ms=now,
                    lease_cutoff_ms=now - CLOCK_SKEW_TOLERANCE_MS,
                    report_errors=False,
                    deadline_ms=inv.deadline_ms,
                )
            except IdempotencyWriteConflictError as exc:
                # Another Region writes this key now: answer as to a duplicate of its claim.
                existing = yield from self._store(tally, "get", store.get, inv.key)
                if existing is None or existing.expired_at(store.clock.now_ms()):
                    tally.report(Outcome.IN_PROGRESS, error=cause_name(exc), op="claim")
                    raise IdempotencyAlreadyInProgressError(
                        "another Region is writing this idempotency key (a replicated write "
                        "conflict outlasted the retries); retry the request"
                    ) from exc
                outcome = ClaimOutcome(claimed=False, previous=existing)
            except IdempotencyPersistenceLayerError as exc:
                yield from self._undo_claim(inv, tally, exc)
                raise
            existing = outcome.previous
            if existing is not None and existing.idempotency_key != inv.key:
                yield from self._refuse_other_key(inv, tally, "claim", held=outcome.claimed)
            if outcome.claimed:
                previous = existing
                break
            if _is_own_claim(existing, inv):
                # Our claim was written but its answer was lost (a timeout or 5xx after the
                # write), and the client's retry met our own record; or a durable execution's
                # replay met the claim an earlier invocation of it took: the key is ours.
                if existing is not None and existing.owner is None:
                    inv = inv._replace(owner=None)  # complete and release as Powertools would
                previous = None
                break
            if existing is not None:
                self._validate(existing, inv, tally)
                if existing.status is Status.COMPLETED:
                    if cache is not None:
                        cache.put(existing)
                    return self._replay(existing, tally, source)
            existing = yield from self._wait(inv, tally, existing)
            if existing is not None:
                self._validate(existing, inv, tally)
                return self._replay(existing, tally, "wait")
            source = "wait"  # the holder released or its lease passed: claim again
            now = store.clock.now_ms()
        else:
            raise IdempotencyPersistenceLayerError(
                f"the store refused {_MAX_CLAIM_ATTEMPTS} claims in a row without a live holder"
            )

        took_over = previous is not None and not previous.expired_at(now)
        return (yield from self._run_and_record(inv, tally, took_over))

    def _undo_claim(
        self, inv: Invocation, tally: Tally, error: IdempotencyPersistenceLayerError
    ) -> Flow:
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
                yield from self._store(
                    tally, "release", self.store.release, inv.key, inv.owner, report_errors=False
                )
            except IdempotencyPersistenceLayerError as exc:
                failed = exc
                _add_note(error, f"idempotent_lambda: undoing the claim failed too: {exc}")
        tally.report(Outcome.STORE_ERROR, error=cause_name(error), op="claim")
        if failed is not None:
            tally.report(Outcome.RELEASE_FAILED, error=cause_name(failed))

    def _wait(
        self, inv: Invocation, tally: Tally, holder: IdempotencyRecord | None
    ) -> Generator[Effect, Any, IdempotencyRecord | None]:
        """Poll until the holder completes (return its record) or gives the key up (None).

        The holder the refused claim reported counts as live until its lease ends, even while a
        read shows an older record: on Redis in Powertools' layout, a caller that holds the
        orphan lock is taking over a record that still reads as abandoned (or expired).

        Raises `IdempotencyAlreadyInProgressError` when waiting is off or its budget runs out.
        """
        clock = self.store.clock
        started = clock.now_ms()
        wait_s = self.config.wait_for_in_progress_seconds
        # Infinite: as long as this invocation's own claim would last (its deadline, with a
        # context); a waiter must never outlive the lease it would hold itself.
        budget_end = inv.lease_end_ms if math.isinf(wait_s) else started + int(wait_s * 1000)
        if inv.deadline_ms is not None:
            budget_end = min(budget_end, inv.deadline_ms - _WAIT_DEADLINE_MARGIN_MS)
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
            holder = yield from self._store(tally, "get", self.store.get, inv.key)
            if holder is not None and holder.idempotency_key != inv.key:
                yield from self._refuse_other_key(inv, tally, "get", held=False)
        return None

    def _refuse_other_key(
        self, inv: Invocation, tally: Tally, operation: str, *, held: bool
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
            yield from self._release(inv, tally, error)
        raise error

    # --- Run the body, then complete, commit or release ---

    def _run_and_record(self, inv: Invocation, tally: Tally, took_over: bool) -> Flow:
        """Run the body under this invocation's claim, then complete (or release) the record.

        Once the body has returned, whatever goes wrong keeping, encoding or storing its result
        (except a store outage, see `_complete`) ends in `_refuse_unstorable`: the record never
        stays IN_PROGRESS for the body to run again.
        """
        started = perf_counter()
        # current_transaction() in the body; the outbox keys its events under the claim
        transaction = open_transaction(self.store, inv.key, claim=inv.owner)
        try:
            result = yield RUN_BODY
        except BaseException as exc:
            close_transaction(transaction)  # its writes are discarded
            tally.handler_ms = _ms_since(started)
            if keeps_claim(exc):  # the execution goes on in a later invocation: keep the key
                tally.report(Outcome.SUSPENDED)
                raise
            if hold_release(functools.partial(self._settle_held, inv, tally, exc), inv.owner):
                raise  # ClaimsPlugin releases it if the invocation ends the execution
            yield from self._release(inv, tally, exc)
            raise
        writes = close_transaction(transaction)
        tally.handler_ms = _ms_since(started)
        try:
            data = self._stored_text(result)
        except IdempotencyUnstorableResultError as exc:
            yield from self._refuse_unstorable(inv, tally, exc, writes)
        if data is None:
            yield from self._release(inv, tally, None)  # not kept: a retry runs again
            return result
        if writes:
            completed = yield from self._commit(inv, tally, data, writes)
        else:
            completed = yield from self._complete(inv, tally, data)
        if completed:
            tally.report(Outcome.TAKEN_OVER if took_over else Outcome.CLAIMED)
        if in_durable():  # as a replay returns it, so the SDK checkpoints what replays give
            return self._from_dict(self.config.format.decode_result(data))
        return result

    def _stored_text(self, result: Any) -> str | None:
        """Return what is stored for ``result``; None when ``store_result_if`` rejects it.

        Raises:
            IdempotencyUnstorableResultError: The filter or the serializer raised, or the
                result has no stored form: it can be neither kept nor dropped safely.
        """
        keep = self._store_result_if
        try:
            if keep is not None and not keep(result):
                return None
        except Exception as exc:
            raise IdempotencyUnstorableResultError(
                "deciding whether to store the result failed: the adapter's store_result_if "
                f"(for HTTP, store_4xx) raised {type(exc).__name__}"
            ) from exc
        try:
            value = self._to_dict(result)
        except Exception as exc:
            raise IdempotencyUnstorableResultError(
                f"output serializer failed on a {type(result).__name__} result: "
                f"{type(exc).__name__}"
            ) from exc
        return self.config.format.encode_result(value)

    def _settle_held(self, inv: Invocation, tally: Tally, error: BaseException, ends: bool) -> None:
        """Release a claim `hold_release` held, once its execution is over (``ends``); else keep it.

        Called by `idempotent_lambda.durable.ClaimsPlugin` when the invocation has ended, on the
        SDK's handler thread.
        """
        if not ends:
            tally.report(Outcome.SUSPENDED)
            return
        run_sync(self._release(inv, tally, error, held=True), _no_body)

    def _release(
        self,
        inv: Invocation,
        tally: Tally,
        original: BaseException | None,
        reason: str | None = None,
        *,
        held: bool = False,
    ) -> Flow:
        """Delete this invocation's claim; a failure is logged and noted on ``original``.

        ``reason`` says why a body that returned is released (logged as the error). A ``held``
        release (`_settle_held`) comes after the rest of the invocation: a later call of the
        same execution may have taken the claim up again and completed it, and that record
        stays, with nothing reported.
        """
        try:
            released = yield from self._store(
                tally,
                "release",
                self.store.release,
                inv.key,
                inv.owner,
                report_errors=False,
                deadline_ms=inv.deadline_ms,
                lease_end_ms=inv.lease_end_ms,
            )
        except IdempotencyPersistenceLayerError as exc:
            if original is not None:
                _add_note(original, f"idempotent_lambda: releasing the record failed too: {exc}")
            tally.report(Outcome.RELEASE_FAILED, error=cause_name(exc))
            return
        if not released:
            released = yield from self._answer_was_lost(inv, tally, None)
        if (
            not released
            and held
            and (yield from self._answer_was_lost(inv, tally, Status.COMPLETED))
        ):
            return
        tally.report(Outcome.RELEASED if released else Outcome.LEASE_LOST, error=reason)

    def _complete(self, inv: Invocation, tally: Tally, data: str) -> Flow:
        """Complete the record with ``data``; False when that failed (logged, not raised).

        On a store outage or a lost lease the caller still gets the result, and the record
        stays IN_PROGRESS until its lease ends. A result the store refuses (too large) or
        fails to write with an error of its own (its compressor, say) is unstorable.
        """
        try:
            ok = yield from self._write_completed(inv, tally, data)
        except IdempotencyUnstorableResultError as exc:
            yield from self._refuse_unstorable(inv, tally, exc)
        except IdempotencyPersistenceLayerError as exc:
            tally.report(Outcome.COMPLETE_FAILED, error=cause_name(exc))
            return False
        except Exception as exc:
            unstorable = IdempotencyUnstorableResultError(
                f"the store failed to write the result: {type(exc).__name__}"
            )
            unstorable.__cause__ = exc
            yield from self._refuse_unstorable(inv, tally, unstorable)
        if not ok:
            tally.report(Outcome.LEASE_LOST)
        return ok

    def _commit(
        self, inv: Invocation, tally: Tally, data: str, writes: Sequence[TransactItem]
    ) -> Flow:
        """Complete in one transaction with the body's business writes: all commit, or none.

        Unlike `_complete`, a failure is raised: the caller must not believe in writes that
        were not made. The record is released (a no-op if an ambiguous failure did commit).
        """
        try:
            ok = yield from self._write_completed(inv, tally, data, writes)
        except IdempotencyUnstorableResultError as exc:  # no marker: nothing is done
            yield from self._refuse_unstorable(inv, tally, exc, writes)
        except Exception as exc:
            store_failed = isinstance(exc, IdempotencyPersistenceLayerError)
            yield from self._release(
                inv, tally, exc, cause_name(exc) if store_failed else type(exc).__name__
            )
            raise
        if not ok:
            tally.report(Outcome.LEASE_LOST, op="complete")
            raise IdempotencyAlreadyInProgressError(
                "this invocation's lease passed before its transaction committed, and another "
                "invocation holds the key now; nothing was written"
            )
        return True

    def _refuse_unstorable(
        self,
        inv: Invocation,
        tally: Tally,
        error: IdempotencyUnstorableResultError,
        writes: Sequence[TransactItem] = (),
    ) -> Generator[Effect, Any, NoReturn]:
        """Settle the record of a result that cannot be stored, then raise.

        Without business writes the record is completed with a marker, so retries raise
        ``error`` too instead of running the body again. With writes nothing was done (they
        commit only with the record): the record is released, `IdempotencyTransactionError`
        raised.
        """
        if writes:
            yield from self._release(inv, tally, error, type(error).__name__)
            raise IdempotencyTransactionError(
                f"nothing was written, because the result cannot be stored: {error}"
            ) from error
        try:
            yield from self._write_completed(
                inv, tally, self.config.format.unstorable_marker(str(error))
            )
        except Exception as exc:  # an outage: the record stays IN_PROGRESS until its lease ends
            tally.report(Outcome.COMPLETE_FAILED, error=cause_name(exc))
        else:
            tally.report(Outcome.UNSTORABLE)
        raise error

    def _write_completed(
        self, inv: Invocation, tally: Tally, data: str, writes: Sequence[TransactItem] = ()
    ) -> Flow:
        """Complete the record with ``data`` (and ``writes``); False when the lease was lost."""
        expiry = self.store.clock.now_ms() // 1000 + self.config.expires_after_seconds
        record = IdempotencyRecord(
            inv.key, Status.COMPLETED, expiry, None, data, inv.payload_hash, inv.owner
        )
        if writes:
            complete_with = transactional(self.store).complete_with
            ok = yield from self._store(
                tally, "complete", complete_with, record, writes, report_errors=False
            )
        else:
            ok = yield from self._store(
                tally,
                "complete",
                self.store.complete,
                record,
                report_errors=False,
                deadline_ms=inv.deadline_ms,
                behind=True,
                lease_end_ms=inv.lease_end_ms,
            )
        if not ok:
            ok = yield from self._answer_was_lost(inv, tally, Status.COMPLETED)
        if ok and self.cache is not None:
            self.cache.put(record)
        return ok

    def _answer_was_lost(self, inv: Invocation, tally: Tally, expected: Status | None) -> Flow:
        """After a refused complete or release, tell whether our own write is what refused it.

        A write whose answer is lost (a timeout or 5xx after DynamoDB applied it) is retried by
        botocore, and the retry's owner condition fails against the write itself. One read on
        this rare path tells that apart from a lease really lost: the record is ours and
        ``expected`` (COMPLETED), or gone (``expected`` None, a release).
        """
        try:
            record = yield from self._store(
                tally, "get", self.store.get, inv.key, report_errors=False
            )
        except IdempotencyPersistenceLayerError:
            return False
        if expected is None:
            return record is None
        return record is not None and record.status is expected and record.owner == inv.owner

    def _store(
        self,
        tally: Tally,
        operation: str,
        function: Callable[..., Any],
        *args: Any,
        report_errors: bool = True,
        deadline_ms: int | None = None,
        behind: bool = False,
        lease_end_ms: int | None = None,
        **kwargs: Any,
    ) -> Flow:
        """Yield one store call, timed and counted on ``tally``; a failure is a STORE_ERROR.

        A write that met another Region's write of the item is tried again after each of
        `_CONFLICT_PAUSES_S`, while a pause ends before ``deadline_ms`` (less the margin).
        ``behind`` marks a completion a batch lane may write while its next record runs, and
        ``lease_end_ms`` (of a completion or a release) when its claim stops protecting it.
        """
        pauses = iter(_CONFLICT_PAUSES_S)
        while True:
            started = perf_counter()
            outer = requests_of_context.get()  # a nested call's, restored after this one
            requests_of_context.set(tally.requests)
            try:
                result = yield StoreCall(function, args, kwargs, behind, lease_end_ms)
            except BaseException as exc:
                requests_of_context.set(outer)
                tally.add_store_call(_ms_since(started))
                if isinstance(exc, IdempotencyWriteConflictError):
                    pause = next(pauses, None)
                    now = self.store.clock.now_ms()
                    if pause is not None and (
                        deadline_ms is None
                        or now + pause * 1000 < deadline_ms - _WAIT_DEADLINE_MARGIN_MS
                    ):
                        yield Pause(pause)
                        continue
                if report_errors and isinstance(exc, IdempotencyPersistenceLayerError):
                    tally.report(Outcome.STORE_ERROR, error=cause_name(exc), op=operation)
                raise
            requests_of_context.set(outer)
            tally.add_store_call(_ms_since(started))
            return result

    # --- Replay ---

    def _validate(self, record: IdempotencyRecord, inv: Invocation, tally: Tally) -> None:
        """Raise `IdempotencyValidationError` if ``record`` was stored for another payload."""
        if inv.payload_hash is not None and record.payload_hash != inv.payload_hash:
            tally.report(Outcome.VALIDATION_FAILED)
            raise IdempotencyValidationError(
                "the payload differs from the one first sent with this idempotency key"
            )

    def _replay(self, record: IdempotencyRecord, tally: Tally, source: str) -> Any:
        """Return the result stored in ``record``; ``source`` says where the record came from.

        Raises:
            IdempotencyUnstorableResultError: It holds the marker of an unstorable result.
            IdempotencyPersistenceLayerError: It holds no result at all.
        """
        tally.report(Outcome.REPLAYED, source=source)
        data = record.response_data
        if data is None:
            raise IdempotencyPersistenceLayerError("a COMPLETED record holds no result")
        reason = self.config.format.unstorable_reason(data)
        if reason is not None:
            raise IdempotencyUnstorableResultError(
                f"the first call ran, but its result could not be stored: {reason}"
            )
        response = self._from_dict(self.config.format.decode_result(data))
        if self.config.response_hook is not None:
            response = self.config.response_hook(response, record)
        if self._on_replay is not None:
            response = self._on_replay(response, record)
        return response


class LocalCache:
    """A thread-safe LRU of COMPLETED records (``use_local_cache``); expired ones drop out."""

    def __init__(self, max_items: int) -> None:
        self._max_items = max_items
        self._items: OrderedDict[str, IdempotencyRecord] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, now_ms: int) -> IdempotencyRecord | None:
        """Return the cached record for ``key`` unless it is absent or expired."""
        with self._lock:
            record = self._items.get(key)
            if record is None:
                return None
            if record.expired_at(now_ms):
                del self._items[key]
                return None
            self._items.move_to_end(key)
            return record

    def put(self, record: IdempotencyRecord) -> None:
        """Remember a COMPLETED record, evicting the least recently used beyond capacity."""
        if record.status is not Status.COMPLETED:
            return
        with self._lock:
            self._items[record.idempotency_key] = record
            self._items.move_to_end(record.idempotency_key)
            while len(self._items) > self._max_items:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


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


def _add_note(error: BaseException, note: str) -> None:
    """Note ``note`` on ``error``: `BaseException.add_note`, or its attribute by hand on 3.10."""
    add_note = getattr(error, "add_note", None)
    if add_note is not None:
        add_note(note)
    else:  # Python 3.10: the attribute 3.11 reads; 3.10's traceback does not print it
        setattr(error, "__notes__", [*getattr(error, "__notes__", ()), note])  # noqa: B010


def _ms_since(started: float) -> float:
    return (perf_counter() - started) * 1000


def _no_body() -> NoReturn:
    raise AssertionError("a release runs no body")  # pragma: no cover - never yielded
