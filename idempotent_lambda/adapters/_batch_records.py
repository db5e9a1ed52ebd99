"""One record of a batch: its identity, and its run through the idempotency state machine.

The raw record is parsed into the source's typed record, its key and validation material are
read (``event_key_jmespath`` and ``payload_validation_jmespath`` on the raw dict, else the
source's default key) and the handler runs once per key. A record without an identity (no key
material, or ``IDEMPOTENCY_DISABLED``) runs unrecorded; either way the handler runs inside a
transaction, so `current_transaction` works and its writes commit atomically.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from idempotent_lambda._effects import run_async
from idempotent_lambda._engine import IdempotentCall
from idempotent_lambda._env import idempotency_disabled
from idempotent_lambda._identity import Invocation, build_invocation, default_prefix
from idempotent_lambda._lambda_context import LambdaContextLike
from idempotent_lambda._observability import Decision, Outcome, report
from idempotent_lambda.exceptions import IdempotencyUnstorableResultError
from idempotent_lambda.transaction import run_unrecorded, run_unrecorded_async

if TYPE_CHECKING:
    from idempotent_lambda.adapters._batch import BatchSource

RecordT = TypeVar("RecordT")


class RecordRunner(Generic[RecordT]):
    """Runs the records of one batch, one call per record, from any lane.

    Args:
        source: The event source's parsing and key rules.
        function: The decorated per-record handler.
        call: The handler's state machine (store, config, cache).
        records: The batch's raw records.
        context: The Lambda context the batch handler received, handed to the record handler.
        lease_context: The context whose remaining time is the records' lease.
        key_prefix: The adapter's ``key_prefix``, else the handler's default prefix.
    """

    def __init__(
        self,
        source: BatchSource[RecordT],
        function: Callable[[RecordT, Any], object],
        call: IdempotentCall,
        records: list[Mapping[str, Any]],
        *,
        context: Any,
        lease_context: LambdaContextLike | None,
        key_prefix: str | None,
    ) -> None:
        self.source = source
        self.function = function
        self.call = call
        self.config = call.config
        self.records = records
        self.context = context
        self.lease_context = lease_context
        self.prefix = key_prefix or default_prefix_of(function)
        self.disabled = idempotency_disabled()
        if self.disabled:
            self._report(Outcome.DISABLED)

    def run(self, index: int) -> BaseException | None:
        """Run record ``index``; return the error that failed it, or None."""
        body_errors: list[BaseException] = []
        try:
            record, invocation = self._prepare(index)
            function = cast(Callable[[Any, Any], object], self.function)

            def body() -> object:
                try:
                    return function(record, self.context)
                except BaseException as exc:
                    body_errors.append(exc)
                    raise

            if invocation is None:
                run_unrecorded(self.call.store, body)
            else:
                self.call.run(invocation, body)
        except Exception as exc:
            return _failure(exc, body_errors)
        return None

    async def run_async(self, index: int) -> BaseException | None:
        """Async `run`, for ``async def`` record handlers."""
        body_errors: list[BaseException] = []
        try:
            record, invocation = self._prepare(index)
            function = cast(Callable[[Any, Any], Awaitable[object]], self.function)

            async def body() -> object:
                try:
                    return await function(record, self.context)
                except BaseException as exc:
                    body_errors.append(exc)
                    raise

            if invocation is None:
                await run_unrecorded_async(self.call.store, body)
            else:
                await run_async(self.call.flow(invocation), body)
        except Exception as exc:
            return _failure(exc, body_errors)
        return None

    def _prepare(self, index: int) -> tuple[RecordT, Invocation | None]:
        """Return the typed record and its identity (None: run without idempotency)."""
        raw = self.records[index]
        source, config = self.source, self.config
        record = source.parse(raw)
        if self.disabled:
            return record, None
        extracted = config.extract(raw)
        invocation = build_invocation(
            config,
            material=extracted.key if config.event_key_jmespath else source.default_key(raw),
            validated=extracted.validation,
            prefix=self.prefix,
            now_ms=self.call.store.clock.now_ms(),
            context=self.lease_context,
        )
        if invocation is None:
            self._report(Outcome.SKIPPED)
        return record, invocation

    def _report(self, outcome: Outcome) -> None:
        report(
            Decision(outcome, self.call.function_name),
            self.config.decision_hook,
            log=self.config.logger,
        )


def default_prefix_of(function: Callable[..., Any]) -> str:
    """Return the default key prefix; a callable object is named by its class."""
    if hasattr(function, "__qualname__") and hasattr(function, "__module__"):
        return default_prefix(function)
    return default_prefix(type(function))


def _failure(exc: BaseException, body_errors: list[BaseException]) -> BaseException | None:
    """Return ``exc`` unless it says the record already ran (its result is just unstorable).

    `IdempotencyUnstorableResultError` from this record's own flow means the body ran (now or
    before) and a retry can only raise again: the record is done. Raised by the body itself (a
    nested call), it is the body's failure like any other.
    """
    own = not any(error is exc for error in body_errors)
    if own and isinstance(exc, IdempotencyUnstorableResultError):
        return None
    return exc
