"""The record state machine, read top to bottom for one invocation.

`IdempotentCall.flow` is a generator that *describes* an invocation: it yields the effects it
needs (a store call, a pause, running the body) and receives their outcomes. The drivers in
`idempotent_lambda._effects` carry them out: `run_sync` for ``def`` functions, `run_async` for
``async def`` ones. Decorators and adapters enter through `IdempotentCall.call` and
`IdempotentCall.acall`, which drive `IdempotentCall.enter` (bind the Lambda context, derive the
identity, then `flow` or `unrecorded`).

Why one generator and two drivers, rather than sync and async code written out side by side:
every rule here (fencing, waiting, takeover, release, transactions, unstorable results) is a
sequence of store calls with decisions between them, and none of the decisions depend on how a
call is awaited. Written once, each rule has one place to read, test and fix, and the sync and
async paths cannot drift apart; the price is one generator step per store call (microseconds,
beside milliseconds of round trip). Only the drivers know about threads, event loops and
cancellation, and each is a few dozen lines.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Generator, Sequence
from time import perf_counter
from typing import Any, NoReturn, TypeVar

from idempotent_lambda._cache import LocalCache
from idempotent_lambda._effects import (
    RUN_BODY,
    Effect,
    Flow,
    Pause,
    StoreCall,
    StoreTally,
    run_async,
    run_sync,
)
from idempotent_lambda._env import idempotency_disabled
from idempotent_lambda._identity import Invocation
from idempotent_lambda._lambda_context import (
    LambdaContextLike,
    as_lambda_context,
    current_lambda_context,
)
from idempotent_lambda._observability import Decision, Outcome, audience, report
from idempotent_lambda._result_codec import (
    UNSTORABLE_START,
    unstorable_marker,
    unstorable_reason,
)
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyKeySchemaError,
    IdempotencyPersistenceLayerError,
    IdempotencyTransactionError,
    IdempotencyUnstorableResultError,
    IdempotencyValidationError,
)
from idempotent_lambda.persistence.base import (
    PersistenceStore,
    TransactItem,
    store_for_format,
    transactional,
)
from idempotent_lambda.record import IdempotencyRecord, Status
from idempotent_lambda.serialization import NoOpSerializer
from idempotent_lambda.transaction import close_transaction, open_transaction

T = TypeVar("T")

Derive = Callable[[LambdaContextLike | None], Invocation | None]
"""Computes one call's identity, given the context whose remaining time is the lease.

Returns None when the payload holds no key material; raises `IdempotencyKeyError` (or an
adapter's own rejection) when the key cannot be read.
"""

#: A lease counts as passed only once it ended this long ago on the claimer's clock, so an
#: instance whose clock runs ahead by up to this much cannot take over a live invocation.
CLOCK_SKEW_TOLERANCE_MS = 1000
#: Polling while waiting for an in-progress duplicate: first pause, growth factor, longest pause.
_WAIT_FIRST_S, _WAIT_FACTOR, _WAIT_MAX_S = 0.02, 1.5, 0.5
#: A waiter gives up this long before its own deadline, to leave time to answer.
_WAIT_DEADLINE_MARGIN_MS = 200
#: Bound on claim attempts in one invocation (each retry follows a release or a lease end).
_MAX_CLAIM_ATTEMPTS = 50
#: The store operation behind outcomes that name one failure (STORE_ERROR passes its own).
_FAILED_OPERATION = {Outcome.COMPLETE_FAILED: "complete", Outcome.RELEASE_FAILED: "release"}


class IdempotentCall:
    """Everything one decorated function needs across invocations: store, config, cache."""

    def __init__(
        self,
        *,
        store: PersistenceStore,
        config: IdempotencyConfig,
        function_name: str,
        serializer: Any,
        store_result_if: Callable[[Any], bool] | None = None,
        on_replay: Callable[[Any, IdempotencyRecord], Any] | None = None,
    ) -> None:
        """Bind one decorated function's collaborators.

        Args:
            store: Where records live; its view for ``config.record_format`` is used.
            config: The function's settings.
            function_name: Used in log lines and decisions.
            serializer: ``to_dict``/``from_dict`` pair for results.
            store_result_if: Adapters' filter: a result it rejects is not stored and the record
                is released (an HTTP 5xx, say), so a retry runs the body again.
            on_replay: Adapters' hook, applied to replayed results after ``config.response_hook``.

        Raises:
            IdempotencyConfigError: ``store`` cannot keep records in ``config.record_format``.
        """
        self.store = store_for_format(store, config.record_format)
        self.config = config
        self._encode_result = config.format.encode_result
        self._decode_result = config.format.decode_result
        self.function_name = function_name
        self.serializer = serializer
        self.store_result_if = store_result_if
        self.on_replay = on_replay
        self.cache = LocalCache(config.local_cache_max_items) if config.use_local_cache else None
        self._wanted = audience(config.decision_hook, config.logger)
        self._rebuild = None if type(serializer) is NoOpSerializer else serializer.from_dict

    def call(
        self,
        context: Any,
        derive: Derive | None,
        body: Callable[[], T],
        *,
        known: IdempotencyRecord | None = None,
    ) -> T:
        """Carry out one call of a ``def`` function: `enter`, driven in this thread.

        Args:
            context: The Lambda context the function was given, if any; bound while it runs.
            derive: Computes the invocation's identity from the lease context (see `enter`);
                None when the caller leaves this call alone (it runs unrecorded, undecided).
            body: The decorated function, bound to its arguments.
            known: The key's record as a strongly consistent read found it just before (a
                batch's read of all its keys); a live COMPLETED one is replayed without a claim.
        """
        return run_sync(self.enter(context, derive, known), body)

    async def acall(
        self,
        context: Any,
        derive: Derive | None,
        body: Callable[[], Awaitable[T]],
        *,
        known: IdempotencyRecord | None = None,
    ) -> T:
        """Carry out one call of an ``async def`` function: `call`, driven on the event loop."""
        return await run_async(self.enter(context, derive, known), body)

    def enter(
        self, context: Any, derive: Derive | None, known: IdempotencyRecord | None = None
    ) -> Flow:
        """Describe one call: bind the context, then run `flow`, or run the body unrecorded.

        The Lambda context is bound first, so nested idempotent functions see it too, and so
        ``derive`` gets the context whose remaining time is the lease. Unless idempotency is
        disabled (logged DISABLED), ``derive`` gives the invocation; None from it (no key
        material) is logged SKIPPED. Without an invocation the body still runs inside a
        transaction, whose queued writes commit when the body returns (`unrecorded`).
        """
        bound = as_lambda_context(context) or current_lambda_context.get()
        token = current_lambda_context.set(bound)
        try:
            invocation = None
            if derive is not None:
                if idempotency_disabled():
                    self.note(Outcome.DISABLED)
                else:
                    invocation = derive(bound or self.config.bound_context())
                    if invocation is None:
                        self.note(Outcome.SKIPPED)
            if invocation is None:
                return (yield from self.unrecorded())
            return (yield from self.flow(invocation, known))
        finally:
            current_lambda_context.reset(token)

    def unrecorded(self) -> Flow:
        """Run the body without a record; then commit its queued writes, if any, atomically.

        A result the adapter would not store (``store_result_if``, an HTTP 5xx say) discards
        the writes, as it does when the invocation is recorded.

        Raises:
            IdempotencyTransactionConflictError: A write's condition failed; nothing was written.
            IdempotencyTransactionError: The writes are invalid.
        """
        binding = open_transaction(self.store)
        try:
            result = yield RUN_BODY
        finally:
            writes = close_transaction(binding)
        if writes and (self.store_result_if is None or self.store_result_if(result)):
            write = transactional(self.store).write_transaction
            yield StoreCall("write_transaction", write, (writes,), StoreTally())
        return result

    def flow(self, inv: Invocation, known: IdempotencyRecord | None = None) -> Flow:
        """Describe one invocation: replay, wait, refuse, or run and record the body.

        ``known`` is the key's record read just before (see `call`). Only a COMPLETED record
        that has not expired is used, with its payload hash checked as on any replay; anything
        else (absent, IN_PROGRESS, expired) goes through the claim, whose condition decides.
        """
        store, cache = self.store, self.cache
        if cache is not None:
            cached = cache.get(inv.key, store.clock.now_ms())
            if cached is not None:
                self._validate(cached, inv)
                return self._replay(cached, inv, source="cache")
        if (
            known is not None
            and known.status is Status.COMPLETED
            and known.idempotency_key == inv.key
            and not known.expired_at(inv.now_ms)
        ):
            self._validate(known, inv)
            if cache is not None:
                cache.put(known)
            return self._replay(known, inv, source="batch_read")

        previous: IdempotencyRecord | None = None
        source = "store"
        now = inv.now_ms
        for _attempt in range(_MAX_CLAIM_ATTEMPTS):
            claim = self._claim_record(inv, now)
            window = {"now_ms": now, "lease_cutoff_ms": now - CLOCK_SKEW_TOLERANCE_MS}
            outcome = yield from self._store(
                inv, StoreCall("claim", store.claim, (claim,), inv.tally, window)
            )
            existing: IdempotencyRecord | None = outcome.previous
            if existing is not None and existing.idempotency_key != inv.key:
                yield from self._refuse_other_key(inv, "claim", held=outcome.claimed)
            if outcome.claimed:
                previous = existing
                break
            if _is_own_claim(existing, inv):
                # Our claim was written but its answer was lost (a timeout or 5xx after the
                # write), and the client's retry met our own record: the key is ours.
                previous = None
                break
            if existing is not None:
                self._validate(existing, inv)
                if existing.status is Status.COMPLETED:
                    if cache is not None:
                        cache.put(existing)
                    return self._replay(existing, inv, source=source)
            existing = yield from self._wait(inv, existing)
            if existing is not None:
                self._validate(existing, inv)
                return self._replay(existing, inv, source="wait")
            source = "wait"  # the holder released or its lease passed: claim again
            now = store.clock.now_ms()
        else:
            raise IdempotencyPersistenceLayerError(
                f"the store refused {_MAX_CLAIM_ATTEMPTS} claims in a row without a live holder"
            )

        took_over = previous is not None and not previous.expired_at(now)
        return (yield from self._run_and_record(inv, took_over))

    def _run_and_record(self, inv: Invocation, took_over: bool) -> Flow:
        """Run the body under this invocation's claim, then complete (or release) the record.

        Once the body has returned, whatever goes wrong deciding whether to keep its result,
        encoding it or storing it (except a store outage, see `_complete`) ends in
        `_refuse_unstorable`: the record never stays IN_PROGRESS for the body to run again.
        """
        started = perf_counter()
        transaction = open_transaction(self.store)  # current_transaction() while the body runs
        try:
            result = yield RUN_BODY
        except BaseException as exc:
            close_transaction(transaction)  # its writes are discarded
            yield from self._release(inv, exc, _ms_since(started))
            raise
        writes = close_transaction(transaction)
        handler_ms = _ms_since(started)
        try:
            data = self._encode_result(self._to_storable(result)) if self._keeps(result) else None
        except IdempotencyUnstorableResultError as exc:
            yield from self._refuse_unstorable(inv, exc, handler_ms, writes)
        if data is None:
            yield from self._release(inv, None, handler_ms)  # not kept: a retry runs again
            return result
        if writes:
            completed = yield from self._commit(inv, data, handler_ms, writes)
        else:
            completed = yield from self._complete(inv, data, handler_ms)
        if completed:
            self._report(Outcome.TAKEN_OVER if took_over else Outcome.CLAIMED, inv, handler_ms)
        return result

    def _keeps(self, result: Any) -> bool:
        """Ask the adapter's ``store_result_if`` whether to keep ``result``; True without one.

        Raises:
            IdempotencyUnstorableResultError: The filter raised (a user's ``store_4xx``, say):
                the result cannot be kept or dropped safely, so it counts as unstorable.
        """
        if self.store_result_if is None:
            return True
        try:
            return bool(self.store_result_if(result))
        except Exception as exc:
            raise IdempotencyUnstorableResultError(
                "deciding whether to store the result failed: the adapter's store_result_if "
                f"(for HTTP, store_4xx) raised {type(exc).__name__}"
            ) from exc

    def _complete(self, inv: Invocation, data: str, handler_ms: float) -> Flow:
        """Complete the record with the encoded result; False when that failed (and is logged).

        A store failure or a lost lease is only logged: the caller still gets the result, and
        the record stays IN_PROGRESS until its lease ends. A result the store refuses (too
        large) or fails to write with an error of its own (its compressor, say) is unstorable.
        """
        try:
            ok = yield from self._write_completed(inv, data)
        except IdempotencyUnstorableResultError as exc:
            yield from self._refuse_unstorable(inv, exc, handler_ms)
        except IdempotencyPersistenceLayerError as exc:
            self._report(Outcome.COMPLETE_FAILED, inv, handler_ms, error=_cause_name(exc))
            return False
        except Exception as exc:
            unstorable = IdempotencyUnstorableResultError(
                f"the store failed to write the result: {type(exc).__name__}"
            )
            unstorable.__cause__ = exc
            yield from self._refuse_unstorable(inv, unstorable, handler_ms)
        if not ok:
            self._report(Outcome.LEASE_LOST, inv, handler_ms)
        return ok

    def _refuse_unstorable(
        self,
        inv: Invocation,
        error: IdempotencyUnstorableResultError,
        handler_ms: float,
        writes: Sequence[TransactItem] = (),
    ) -> Generator[Effect, Any, NoReturn]:
        """Settle the record of a result that cannot be stored, then raise.

        Without business writes the record is completed with a marker, so retries raise
        ``error`` too instead of running the body again. With writes nothing was done (they
        commit only with the record): the record is released and `IdempotencyTransactionError`
        raised.
        """
        if writes:
            yield from self._release(inv, error, handler_ms, reason=type(error).__name__)
            raise IdempotencyTransactionError(
                f"nothing was written, because the result cannot be stored: {error}"
            ) from error
        yield from self._store_marker(inv, str(error), handler_ms)
        raise error

    def _answer_was_lost(self, inv: Invocation, expected: Status | None) -> Flow:
        """After a refused complete/release, tell whether our own write is what refused it.

        A write whose answer is lost (a timeout or 5xx after DynamoDB applied it) is retried by
        botocore, and the retry's owner condition fails against the write itself. One read on
        this rare path tells that apart from a lease really lost: the record is ours and
        ``expected`` (COMPLETED), or gone (``expected`` None, a release).
        """
        try:
            record = yield from self._store(
                inv, StoreCall("get", self.store.get, (inv.key,), inv.tally), report_errors=False
            )
        except IdempotencyPersistenceLayerError:
            return False
        if expected is None:
            return record is None
        return record is not None and record.status is expected and record.owner == inv.owner

    def _commit(
        self, inv: Invocation, data: str, handler_ms: float, writes: Sequence[TransactItem]
    ) -> Flow:
        """Complete in one transaction with the body's business writes: all commit, or none.

        Unlike a plain completion, a failure is never swallowed: the caller must not believe in
        writes that were not made. The record is released (a no-op if an ambiguous failure did
        commit).
        """
        try:
            ok = yield from self._write_completed(inv, data, writes)
        except IdempotencyUnstorableResultError as exc:  # no marker: nothing is done
            yield from self._refuse_unstorable(inv, exc, handler_ms, writes)
        except Exception as exc:
            store_failed = isinstance(exc, IdempotencyPersistenceLayerError)
            reason = _cause_name(exc) if store_failed else type(exc).__name__
            yield from self._release(inv, exc, handler_ms, reason=reason)
            raise
        if not ok:
            self._report(Outcome.LEASE_LOST, inv, handler_ms, op="complete")
            raise IdempotencyAlreadyInProgressError(
                "this invocation's lease passed before its transaction committed, and another "
                "invocation holds the key now; nothing was written"
            )
        return True

    def _to_storable(self, result: Any) -> Any:
        try:
            return self.serializer.to_dict(result)
        except Exception as exc:
            raise IdempotencyUnstorableResultError(
                f"output serializer failed on a {type(result).__name__} result: "
                f"{type(exc).__name__}"
            ) from exc

    def _claim_record(self, inv: Invocation, now: int) -> IdempotencyRecord:
        """Return the IN_PROGRESS record a claim at ``now`` writes."""
        return IdempotencyRecord(
            inv.key,
            Status.IN_PROGRESS,
            inv.expiry_seconds(now, self.config.expires_after_seconds),
            inv.lease_end_ms,
            None,
            inv.payload_hash,
            inv.owner,
        )

    def _completed_record(self, inv: Invocation, data: str) -> IdempotencyRecord:
        expiry = self.store.clock.now_ms() // 1000 + self.config.expires_after_seconds
        return IdempotencyRecord(
            inv.key, Status.COMPLETED, expiry, None, data, inv.payload_hash, inv.owner
        )

    def _write_completed(
        self, inv: Invocation, data: str, writes: Sequence[TransactItem] = ()
    ) -> Flow:
        """Complete the record with ``data`` (and ``writes``); False when the lease was lost.

        A refused write is checked with `_answer_was_lost`: botocore retries a write whose answer
        was lost (transactions with the same ClientRequestToken), and the retry is refused by
        the write itself.
        """
        record = self._completed_record(inv, data)
        call = (
            StoreCall(
                "complete", transactional(self.store).complete_with, (record, writes), inv.tally
            )
            if writes
            else StoreCall("complete", self.store.complete, (record,), inv.tally)
        )
        ok = yield from self._store(inv, call, report_errors=False)
        if not ok:
            ok = yield from self._answer_was_lost(inv, Status.COMPLETED)
        if ok and self.cache is not None:
            self.cache.put(record)
        return ok

    def _store_marker(self, inv: Invocation, reason: str, handler_ms: float) -> Flow:
        """Complete with a marker so retries raise too instead of running the body again."""
        try:
            yield from self._write_completed(inv, unstorable_marker(reason))
        except Exception as exc:  # an outage: the record stays IN_PROGRESS until its lease ends
            self._report(Outcome.COMPLETE_FAILED, inv, handler_ms, error=_cause_name(exc))
            return
        self._report(Outcome.UNSTORABLE, inv, handler_ms)

    def _release(
        self,
        inv: Invocation,
        original: BaseException | None,
        handler_ms: float,
        *,
        reason: str | None = None,
    ) -> Flow:
        """Delete this invocation's claim; a failure is logged (and noted on ``original``).

        ``reason`` names why a completed body is released instead (logged as the error).
        """
        try:
            released = yield from self._store(
                inv,
                StoreCall("release", self.store.release, (inv.key, inv.owner), inv.tally),
                report_errors=False,
            )
        except IdempotencyPersistenceLayerError as exc:
            if original is not None:
                _add_note(original, f"idempotent_lambda: releasing the record failed too: {exc}")
            self._report(Outcome.RELEASE_FAILED, inv, handler_ms, error=_cause_name(exc))
            return
        if not released:
            released = yield from self._answer_was_lost(inv, None)
        outcome = Outcome.RELEASED if released else Outcome.LEASE_LOST
        self._report(outcome, inv, handler_ms, error=reason)

    def _wait(
        self, inv: Invocation, holder: IdempotencyRecord | None
    ) -> Generator[Effect, Any, IdempotencyRecord | None]:
        """Poll until the holder completes (return its record) or gives the key up (None).

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
        pause = _WAIT_FIRST_S
        paused_ms = 0.0
        while holder is not None and holder.status is Status.IN_PROGRESS:
            now = clock.now_ms()
            if holder.lease_passed(now - CLOCK_SKEW_TOLERANCE_MS):
                return None
            # The pauses count too, so the budget runs out even on a clock that stands still
            # or jumps back (a test's ManualClock): waiting never turns into a hang.
            if max(now, started + paused_ms) + pause * 1000 > budget_end:
                self._report(Outcome.IN_PROGRESS, inv, None)
                raise IdempotencyAlreadyInProgressError(
                    "another invocation is processing this idempotency key",
                    lease_expires_at_ms=holder.in_progress_expiry_timestamp,
                )
            yield Pause(pause)
            paused_ms += pause * 1000
            pause = min(pause * _WAIT_FACTOR, _WAIT_MAX_S)
            holder = yield from self._store(
                inv, StoreCall("get", self.store.get, (inv.key,), inv.tally)
            )
            if holder is not None and holder.idempotency_key != inv.key:
                yield from self._refuse_other_key(inv, "get", held=False)
        if holder is None or holder.expired_at(clock.now_ms()):
            return None
        return holder

    def _refuse_other_key(
        self, inv: Invocation, operation: str, *, held: bool
    ) -> Generator[Effect, Any, NoReturn]:
        """Raise `IdempotencyKeySchemaError`: the store answered with another key's record.

        Such a record says nothing about this key (a table keyed differently from its store
        puts every key on one item), so it is neither replayed nor waited on. A claim that was
        written over it (``held``) is released first.
        """
        error = IdempotencyKeySchemaError(
            "the store answered with the record of another idempotency key: it is not keyed "
            "the way it was configured (for DynamoDB, key_attr and sort_key_attr must name the "
            "table's partition and sort key); nothing was replayed and the function did not run"
        )
        self._report(Outcome.STORE_ERROR, inv, None, error=type(error).__name__, op=operation)
        if held:
            yield from self._release(inv, error, 0.0)
        raise error

    def _store(self, inv: Invocation, call: StoreCall, *, report_errors: bool = True) -> Flow:
        """Yield ``call``; a store failure is reported as STORE_ERROR when ``report_errors``."""
        try:
            return (yield call)
        except IdempotencyPersistenceLayerError as exc:
            if report_errors:
                self._report(
                    Outcome.STORE_ERROR, inv, None, error=_cause_name(exc), op=call.operation
                )
            raise

    def _validate(self, record: IdempotencyRecord, inv: Invocation) -> None:
        if inv.payload_hash is not None and record.payload_hash != inv.payload_hash:
            self._report(Outcome.VALIDATION_FAILED, inv, None)
            raise IdempotencyValidationError(
                "the payload differs from the one first sent with this idempotency key"
            )

    def _replay(self, record: IdempotencyRecord, inv: Invocation, source: str) -> Any:
        if self._wanted(Outcome.REPLAYED):  # the commonest decision: skip the call when unheard
            self._report(Outcome.REPLAYED, inv, None, source=source)
        data = record.response_data
        if data is None:
            raise IdempotencyPersistenceLayerError("a COMPLETED record holds no result")
        reason = unstorable_reason(data) if data.startswith(UNSTORABLE_START) else None
        if reason is not None:
            raise IdempotencyUnstorableResultError(
                f"the first call ran, but its result could not be stored: {reason}"
            )
        response = self._decode_result(data)
        if self._rebuild is not None:
            response = self._rebuild(response)
        if self.config.response_hook is not None:
            response = self.config.response_hook(response, record)
        if self.on_replay is not None:
            response = self.on_replay(response, record)
        return response

    def note(self, outcome: Outcome) -> None:
        """Report a decision about a call that has no invocation (DISABLED, SKIPPED)."""
        report(
            Decision(outcome, self.function_name), self.config.decision_hook, log=self.config.logger
        )

    def _report(
        self,
        outcome: Outcome,
        inv: Invocation,
        handler_ms: float | None,
        *,
        source: str | None = None,
        error: str | None = None,
        op: str | None = None,
    ) -> None:
        if not self._wanted(outcome):
            return
        report(
            Decision(
                outcome=outcome,
                function=self.function_name,
                key=inv.key,
                store_ms=inv.tally.ms,
                handler_ms=handler_ms,
                store_calls=inv.tally.calls,
                source=source,
                error=error,
                operation=op or _FAILED_OPERATION.get(outcome),
            ),
            self.config.decision_hook,
            log=self.config.logger,
        )


def _add_note(error: BaseException, note: str) -> None:
    """Note ``note`` on ``error``: `BaseException.add_note`, or its attribute by hand on 3.10."""
    add_note = getattr(error, "add_note", None)
    if add_note is not None:
        add_note(note)
    else:  # Python 3.10: the attribute 3.11 reads; 3.10's traceback does not print it
        setattr(error, "__notes__", [*getattr(error, "__notes__", ()), note])  # noqa: B010


def _is_own_claim(record: IdempotencyRecord | None, inv: Invocation) -> bool:
    """Tell whether a record that blocked a claim is this invocation's own IN_PROGRESS claim."""
    return record is not None and record.status is Status.IN_PROGRESS and record.owner == inv.owner


def _ms_since(started: float) -> float:
    return (perf_counter() - started) * 1000


def _cause_name(exc: BaseException) -> str:
    cause = exc.__cause__
    return type(cause if cause is not None else exc).__name__
