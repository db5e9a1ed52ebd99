"""One record of a batch: its identity, and its run through the idempotency state machine.

The raw record is parsed into the source's typed record, its key and validation material are
read (``event_key_jmespath`` and ``payload_validation_jmespath`` on the raw dict, else the
source's default key) and the handler runs once per key. A record without an identity (no key
material, or ``IDEMPOTENCY_DISABLED``) runs unrecorded; either way the handler runs inside a
transaction, so `current_transaction` works and its writes commit atomically.

Each record's key is known before any record runs (`RecordRunner.key`): the batch plans its
lanes by key and reads every key at once. Key material is extracted once per record; the
invocation itself (owner, lease, clock reading) is built when the record starts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from idempotent_lambda._effects import TrackedBody
from idempotent_lambda._engine import Derive, IdempotentFunction, idempotency_disabled
from idempotent_lambda._identity import Invocation, build_invocation, default_prefix
from idempotent_lambda._lambda_context import LambdaContextLike
from idempotent_lambda._observability import Outcome
from idempotent_lambda.adapters._batch_source import BatchSource
from idempotent_lambda.exceptions import IdempotencyUnstorableResultError
from idempotent_lambda.record import IdempotencyRecord

RecordT = TypeVar("RecordT")


class RecordRunner(Generic[RecordT]):
    """Runs the records of one batch, one call per record, from any lane.

    Args:
        source: The event source's parsing and key rules.
        function: The decorated per-record handler.
        call: The handler's state machine (store, config, cache).
        records: The batch's raw records.
        context: The Lambda context the batch handler received, handed to the record handler.
        key_prefix: The adapter's ``key_prefix``, else the handler's default prefix.
    """

    def __init__(  # noqa: PLR0917 - built in one place, from the batch's state
        self,
        source: BatchSource[RecordT],
        function: Callable[[RecordT, Any], object],
        call: IdempotentFunction,
        records: list[Mapping[str, Any]],
        context: Any,
        key_prefix: str | None,
    ) -> None:
        self.source = source
        self.function = function
        self.call = call
        self.config = call.config
        self.records = records
        self.context = context
        self.prefix = key_prefix or default_prefix_of(function)
        self.disabled = idempotency_disabled()  # one decision for the whole batch
        if self.disabled:
            call.note(Outcome.DISABLED)
        self._records = [_Record(self, index) for index in range(len(records))]

    def key(self, index: int) -> str | None:
        """Return record ``index``'s idempotency key; None without one or when it cannot be read.

        An unreadable record is not failed here: its run fails it with the same error.
        """
        if self.disabled:
            return None
        try:
            invocation = self._records[index].derive(None)
        except Exception:  # reported by the record's own run, which meets it again
            return None
        return None if invocation is None else invocation.key

    def run(self, index: int, known: IdempotencyRecord | None = None) -> BaseException | None:
        """Run record ``index``; return the error that failed it, or None.

        ``known`` is the record's stored record when the batch read it up front.
        """
        record = self._records[index]
        try:
            self.call.call(self.context, record.deriver, record.body.run, known=known)
        except Exception as exc:
            return record.failure(exc)
        return None

    async def run_async(
        self, index: int, known: IdempotencyRecord | None = None
    ) -> BaseException | None:
        """Async `run`, for ``async def`` record handlers."""
        record = self._records[index]
        try:
            await self.call.acall(self.context, record.deriver, record.body.run_async, known=known)
        except Exception as exc:
            return record.failure(exc)
        return None


class _Record(Generic[RecordT]):
    """One record's run: parsed once (when its identity or its handler first needs it)."""

    def __init__(self, runner: RecordRunner[RecordT], index: int) -> None:
        self.runner = runner
        self.raw = runner.records[index]
        self._parsed: tuple[RecordT] | None = None
        self._material: tuple[Any, Any] | None = None
        self.body = TrackedBody(self._handle)
        self.deriver: Derive | None = None if runner.disabled else self.derive

    def parsed(self) -> RecordT:
        """Return the typed record; raises `MalformedRecordError`."""
        if self._parsed is None:
            self._parsed = (self.runner.source.parse(self.raw),)
        return self._parsed[0]

    def _handle(self) -> Any:
        return self.runner.function(self.parsed(), self.runner.context)

    def derive(self, lease: LambdaContextLike | None) -> Invocation | None:
        """Return the record's identity (None: run without idempotency)."""
        runner, config = self.runner, self.runner.config
        if self._material is None:
            raw = self.raw
            self.parsed()  # a malformed record fails before anything is claimed
            extracted = config.extract(raw)
            key = extracted.key if config.event_key_jmespath else runner.source.default_key(raw)
            self._material = (key, extracted.validation)
        material, validated = self._material
        return build_invocation(
            config,
            material=material,
            validated=validated,
            prefix=runner.prefix,
            now_ms=runner.call.store.clock.now_ms(),
            context=lease,
        )

    def failure(self, exc: BaseException) -> BaseException | None:
        """Return ``exc`` unless it says the record already ran (its result is just unstorable).

        `IdempotencyUnstorableResultError` from this record's own flow means the body ran (now
        or before) and a retry can only raise again: the record is done. Raised by the body
        itself (a nested call), it is the body's failure like any other.
        """
        if isinstance(exc, IdempotencyUnstorableResultError) and not self.body.raised:
            return None
        return exc


def default_prefix_of(function: Callable[..., Any]) -> str:
    """Return the default key prefix; a callable object is named by its class."""
    return default_prefix(prefix_named_by(function))


def prefix_named_by(function: Callable[..., Any]) -> Any:
    """Return what names the default prefix: the function, or a callable object's class."""
    if hasattr(function, "__qualname__") and hasattr(function, "__module__"):
        return function
    return type(function)
