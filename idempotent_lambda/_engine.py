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

The invocation reads on in three modules, each called explicitly from here (no mixins):
`idempotent_lambda._recording` runs the body under a claim and completes, commits or releases
the record; `idempotent_lambda._replay` turns a COMPLETED record back into the answer; and
`idempotent_lambda._reporting` reports every decision, a failed store call's included.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Generator
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
from idempotent_lambda._observability import Outcome
from idempotent_lambda._recording import Recorder
from idempotent_lambda._replay import Replayer
from idempotent_lambda._reporting import Reporter
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyKeySchemaError,
    IdempotencyPersistenceLayerError,
)
from idempotent_lambda.persistence.protocol import (
    PersistenceStore,
    store_for_format,
    transactional,
)
from idempotent_lambda.record import IdempotencyRecord, Status
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
        self.function_name = function_name
        self.serializer = serializer
        self.store_result_if = store_result_if
        self.on_replay = on_replay
        self.cache = LocalCache(config.local_cache_max_items) if config.use_local_cache else None
        self.reporter = Reporter(config, function_name)
        self.replayer = Replayer(config, serializer, on_replay, self.reporter)
        self.recorder = Recorder(
            store=self.store,
            config=config,
            serializer=serializer,
            store_result_if=store_result_if,
            cache=self.cache,
            reporter=self.reporter,
        )

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
        store, cache, replayer = self.store, self.cache, self.replayer
        if cache is not None:
            cached = cache.get(inv.key, store.clock.now_ms())
            if cached is not None:
                replayer.validate(cached, inv)
                return replayer.replay(cached, inv, source="cache")
        if (
            known is not None
            and known.status is Status.COMPLETED
            and known.idempotency_key == inv.key
            and not known.expired_at(inv.now_ms)
        ):
            replayer.validate(known, inv)
            if cache is not None:
                cache.put(known)
            return replayer.replay(known, inv, source="batch_read")

        previous: IdempotencyRecord | None = None
        source = "store"
        now = inv.now_ms
        for _attempt in range(_MAX_CLAIM_ATTEMPTS):
            claim = self._claim_record(inv, now)
            window = {"now_ms": now, "lease_cutoff_ms": now - CLOCK_SKEW_TOLERANCE_MS}
            outcome = yield from self.reporter.store(
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
                replayer.validate(existing, inv)
                if existing.status is Status.COMPLETED:
                    if cache is not None:
                        cache.put(existing)
                    return replayer.replay(existing, inv, source=source)
            existing = yield from self._wait(inv, existing)
            if existing is not None:
                replayer.validate(existing, inv)
                return replayer.replay(existing, inv, source="wait")
            source = "wait"  # the holder released or its lease passed: claim again
            now = store.clock.now_ms()
        else:
            raise IdempotencyPersistenceLayerError(
                f"the store refused {_MAX_CLAIM_ATTEMPTS} claims in a row without a live holder"
            )

        took_over = previous is not None and not previous.expired_at(now)
        return (yield from self.recorder.run_and_record(inv, took_over))

    def note(self, outcome: Outcome) -> None:
        """Report a decision about a call that has no invocation (DISABLED, SKIPPED)."""
        self.reporter.note(outcome)

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
                self.reporter.report(Outcome.IN_PROGRESS, inv, None)
                raise IdempotencyAlreadyInProgressError(
                    "another invocation is processing this idempotency key",
                    lease_expires_at_ms=holder.in_progress_expiry_timestamp,
                )
            yield Pause(pause)
            paused_ms += pause * 1000
            pause = min(pause * _WAIT_FACTOR, _WAIT_MAX_S)
            holder = yield from self.reporter.store(
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
        self.reporter.report(
            Outcome.STORE_ERROR, inv, None, error=type(error).__name__, op=operation
        )
        if held:
            yield from self.recorder.release(inv, error, 0.0)
        raise error


def _is_own_claim(record: IdempotencyRecord | None, inv: Invocation) -> bool:
    """Tell whether a record that blocked a claim is this invocation's own IN_PROGRESS claim."""
    return record is not None and record.status is Status.IN_PROGRESS and record.owner == inv.owner
