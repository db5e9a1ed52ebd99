"""The record state machine of one decorated function, read top to bottom.

`IdempotentFunction.flow` is a generator that describes one invocation: it yields effects (a
store call, a pause, running the body) and gets their outcomes back; the drivers in
`idempotent_lambda._effects` carry them out, in the caller's thread (`run_sync`) or on its event
loop (`run_async`). Every rule of the state machine (fencing, waiting, takeover, release,
transactions, unstorable results) is a run of store calls with decisions between them that do
not depend on how a call is awaited, so each is written once for `def` and `async def` alike.

In reading order: `call`/`acall` → `enter` → `flow` (local cache, then the claim loop,
`idempotent_lambda._claim.claim`, which claims, waits or finds a result to replay) →
`_run_and_record`. The store calls that keep, release or replay a result are
`idempotent_lambda._recording.Recorder`'s.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any, NoReturn, TypedDict, TypeVar

from idempotent_lambda._claim import claim
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
from idempotent_lambda._effects import RUN_BODY, Flow, StoreCall, run_async, run_sync
from idempotent_lambda._identity import Derive, Invocation, key_source_of
from idempotent_lambda._lambda_context import (
    as_lambda_context,
    current_lambda_context,
    start_running,
    stop_running,
    with_time_left,
)
from idempotent_lambda._observability import Outcome, Reporter, Tally
from idempotent_lambda._recording import Recorder, ms_since
from idempotent_lambda._tracing import traced
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import IdempotencyUnstorableResultError
from idempotent_lambda.persistence.protocol import (
    PersistenceStore,
    transactional,
)
from idempotent_lambda.record import IdempotencyRecord, Status
from idempotent_lambda.transaction import close_transaction, open_transaction

T = TypeVar("T")

_DISABLE_VARIABLES = ("IDEMPOTENCY_DISABLED", "POWERTOOLS_IDEMPOTENCY_DISABLED")
_TRUTHY = frozenset({"1", "true", "yes", "on", "y", "t"})


class Hooks(TypedDict, total=False):
    """What an adapter adds to a function's engine: see `IdempotentFunction` for each."""

    store_result_if: Callable[[Any], bool] | None
    on_replay: Callable[[Any, IdempotencyRecord], Any] | None
    key_source: str | None
    key_prefix: Callable[[], str] | None


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
        self.recorder = Recorder(self.store, config, serializer, store_result_if, on_replay)
        self.reporter = Reporter(function_name, config.decision_hook, config.logger, execution)
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
        keep = self.recorder.store_result_if
        if writes and (keep is None or keep(result)):
            yield StoreCall(transactional(self.store).write_transaction, (writes,), {})
        return result

    # --- Claim, run the body, record ---

    def flow(self, inv: Invocation, known: IdempotencyRecord | None = None) -> Flow:
        """Describe one invocation: replay, wait, refuse, or claim, run the body and record it.

        ``known`` (the key's record, read just before) is replayed only when it is COMPLETED
        and live; anything else goes through the claim (`idempotent_lambda._claim.claim`),
        whose condition decides.
        """
        tally = self.reporter.tally(inv.key)
        recorder, cache = self.recorder, self.recorder.cache
        if cache is not None:
            cached = cache.get(inv.key, self.store.clock.now_ms())
            if cached is not None:
                recorder.validate(cached, inv, tally)
                return recorder.replay(cached, tally, "cache")
        if (
            known is not None
            and known.status is Status.COMPLETED
            and known.idempotency_key == inv.key
            and not known.expired_at(inv.now_ms)
        ):
            recorder.validate(known, inv, tally)
            if cache is not None:
                cache.put(known)
            return recorder.replay(known, tally, "batch_read")
        held = yield from claim(recorder, inv, tally)
        if held.replay is not None:
            return recorder.replay(held.replay, tally, held.source)
        return (yield from self._run_and_record(held.inv, tally, held.took_over))

    def _run_and_record(self, inv: Invocation, tally: Tally, took_over: bool) -> Flow:
        """Run the body under this invocation's claim, then complete (or release) the record.

        Once the body has returned, whatever goes wrong keeping, encoding or storing its result
        (except a store outage, see `Recorder.complete`) ends in `Recorder.refuse_unstorable`:
        the record never stays IN_PROGRESS for the body to run again.
        """
        recorder = self.recorder
        started = perf_counter()
        # current_transaction() in the body; the outbox keys its events under the claim
        transaction = open_transaction(self.store, inv.key, claim=inv.owner)
        try:
            result = yield RUN_BODY
        except BaseException as exc:
            close_transaction(transaction)  # its writes are discarded
            tally.handler_ms = ms_since(started)
            if keeps_claim(exc):  # the execution goes on in a later invocation: keep the key
                tally.report(Outcome.SUSPENDED)
                raise
            if hold_release(functools.partial(self.settle_held, inv, tally, exc), inv.owner):
                raise  # ClaimsPlugin releases it if the invocation ends the execution
            yield from recorder.release(inv, tally, exc)
            raise
        writes = close_transaction(transaction)
        tally.handler_ms = ms_since(started)
        try:
            data = recorder.stored_text(result)
        except IdempotencyUnstorableResultError as exc:
            yield from recorder.refuse_unstorable(inv, tally, exc, writes)
        if data is None:
            yield from recorder.release(inv, tally, None)  # not kept: a retry runs again
            return result
        if writes:
            completed = yield from recorder.commit(inv, tally, data, writes)
        else:
            completed = yield from recorder.complete(inv, tally, data)
        if completed:
            tally.report(Outcome.TAKEN_OVER if took_over else Outcome.CLAIMED)
        if in_durable():  # as a replay returns it, so the SDK checkpoints what replays give
            return recorder.rebuild(data)
        return result

    def settle_held(self, inv: Invocation, tally: Tally, error: BaseException, ends: bool) -> None:
        """Release a claim `hold_release` held, once its execution is over (``ends``); else keep it.

        Called by `idempotent_lambda.durable.ClaimsPlugin` when the invocation has ended, on the
        SDK's handler thread.
        """
        if not ends:
            tally.report(Outcome.SUSPENDED)
            return
        run_sync(self.recorder.release(inv, tally, error, held=True), _no_body)


def _no_body() -> NoReturn:
    raise AssertionError("a release runs no body")  # pragma: no cover - never yielded
