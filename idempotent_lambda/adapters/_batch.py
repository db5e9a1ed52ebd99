"""The batch loop shared by the SQS and DynamoDB Stream adapters.

One call of a batch handler reads the event's ``Records``, plans which records must keep their
order, runs each record through the idempotency state machine and answers with Lambda's partial
batch response, ``{"batchItemFailures": [{"itemIdentifier": ...}, ...]}``: the records to retry.

Rules both sources share:

- A problem with one record (malformed, no key, in progress elsewhere, handler raised, store
  failed) fails that record alone. The batch handler never raises because of a record.
- Ordered sources (FIFO queues, streams): once a record fails, no further record starts; the
  failed record and every record not processed are reported.
- Time budget: before a record starts, the Lambda context's remaining time is checked; below the
  safety margin the batch stops and the rest is reported, instead of Lambda killing it mid-record.
- Concurrency: each *lane* (a standard-queue record, a FIFO message group, or a whole ordered
  batch) runs in order; up to ``max_concurrency`` lanes run at once in a thread pool (or as
  asyncio tasks for ``async def`` handlers), each bound to the batch's Lambda context.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypedDict, TypeVar, cast

import jmespath

from idempotent_lambda._engine import IdempotentCall, run_async, run_sync
from idempotent_lambda._env import idempotency_disabled
from idempotent_lambda._identity import Invocation, build_invocation, default_prefix
from idempotent_lambda._lambda_context import (
    LambdaContextLike,
    as_lambda_context,
    current_lambda_context,
    remaining_ms,
)
from idempotent_lambda._observability import Decision, Outcome, report
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import (
    IdempotencyConfigError,
    IdempotencyError,
    IdempotencyKeyError,
    IdempotencyUnstorableResultError,
)
from idempotent_lambda.persistence.base import PersistenceStore
from idempotent_lambda.serialization import resolve_serializer

RecordT = TypeVar("RecordT")

#: Default for ``time_safety_margin_ms``: no record starts with less time than this left.
DEFAULT_TIME_SAFETY_MARGIN_MS = 1_000

logger = logging.getLogger("idempotent_lambda.batch")


class MalformedEventError(IdempotencyError, ValueError):
    """The event is not a batch at all: not a mapping, or no ``Records`` list.

    Raised by a batch handler (the only error it raises), because such an event means the function
    is wired to the wrong source or invoked by hand; there is no record to report.
    """


class MalformedRecordError(IdempotencyError, ValueError):
    """A record lacks a field its source always sends, or holds one of the wrong type.

    Never raised out of a batch handler: the record is reported failed and logged.
    """


class BatchItemFailure(TypedDict):
    """One record for Lambda to retry."""

    itemIdentifier: str


class PartialBatchResponse(TypedDict):
    """What a batch handler returns (needs ``ReportBatchItemFailures`` on the mapping)."""

    batchItemFailures: list[BatchItemFailure]


BatchHandler = Callable[[Any, Any], PartialBatchResponse]
"""A Lambda handler ``handler(event, context)`` for a batch event source."""

#: A plan: the lanes (record indexes to run in order) and whether a failure stops the batch.
Plan = tuple[list[list[int]], bool]


@dataclass(frozen=True, slots=True)
class BatchSource(Generic[RecordT]):
    """What sets one event source apart from another.

    Attributes:
        name: Source name in log lines (``"sqs"``, ``"dynamodb_stream"``).
        identify: Raw record -> its ``itemIdentifier``; None when it has none.
        parse: Raw record -> typed record; raises `MalformedRecordError`.
        default_key: Raw record -> key material when ``event_key_jmespath`` is empty.
        plan: Raw records (all mappings) and ``max_concurrency`` -> the batch's `Plan`.
        adopt_json: Hands the typed record a body the key expression already parsed
            (``(record, text, value)``), so the body is parsed once.
    """

    name: str
    identify: Callable[[Any], str | None]
    parse: Callable[[Mapping[str, Any]], RecordT]
    default_key: Callable[[Mapping[str, Any]], Any]
    plan: Callable[[Sequence[Mapping[str, Any]], int], Plan]
    adopt_json: Callable[[RecordT, str, Any], None] | None = None


def batch_decorator(
    source: BatchSource[RecordT],
    *,
    persistence_store: PersistenceStore,
    config: IdempotencyConfig | None,
    key_prefix: str | None,
    max_concurrency: int,
    time_safety_margin_ms: int,
) -> Callable[[Callable[[RecordT, Any], object]], BatchHandler]:
    """Validate the adapter's options and return the decorator of per-record handlers.

    Raises:
        IdempotencyConfigError: An option is unusable (at decoration time).
    """
    if not isinstance(persistence_store, PersistenceStore):
        raise IdempotencyConfigError(
            "persistence_store must be a PersistenceStore such as DynamoDBPersistenceLayer or "
            "InMemoryPersistenceLayer"
        )
    if config is not None and not isinstance(config, IdempotencyConfig):
        raise IdempotencyConfigError("config must be an IdempotencyConfig")
    if key_prefix is not None and (not isinstance(key_prefix, str) or not key_prefix):
        raise IdempotencyConfigError("key_prefix must be a non-empty string")
    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int):
        raise IdempotencyConfigError("max_concurrency must be an integer >= 1")
    if max_concurrency < 1:
        raise IdempotencyConfigError("max_concurrency must be an integer >= 1")
    margin = time_safety_margin_ms
    if isinstance(margin, bool) or not isinstance(margin, int) or margin < 0:
        raise IdempotencyConfigError("time_safety_margin_ms must be an integer >= 0")
    settings = config if config is not None else IdempotencyConfig()

    def decorate(function: Callable[[RecordT, Any], object]) -> BatchHandler:
        if not callable(function):
            raise IdempotencyConfigError("the decorated record handler must be callable")
        processor = _Processor(
            source,
            function,
            store=persistence_store,
            config=settings,
            key_prefix=key_prefix,
            max_concurrency=max_concurrency,
            margin_ms=margin,
        )

        @functools.wraps(function)
        def batch_handler(event: Any, context: Any = None) -> PartialBatchResponse:
            return processor.handle(event, context)

        return batch_handler

    return decorate


class _Processor(Generic[RecordT]):
    """Everything one decorated record handler keeps across batches."""

    def __init__(
        self,
        source: BatchSource[RecordT],
        function: Callable[[RecordT, Any], object],
        *,
        store: PersistenceStore,
        config: IdempotencyConfig,
        key_prefix: str | None,
        max_concurrency: int,
        margin_ms: int,
    ) -> None:
        self.source = source
        self.function = function
        self.is_async = inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
            type(function).__call__
        )
        self.store = store
        self.config = config
        self.key_prefix = key_prefix
        self.max_concurrency = max_concurrency
        self.margin_ms = margin_ms
        self.call = IdempotentCall(
            store=store,
            config=config,
            function_name=getattr(function, "__qualname__", type(function).__qualname__),
            serializer=resolve_serializer(None, function),
        )

    def handle(self, event: Any, context: Any) -> PartialBatchResponse:
        """Process one batch and return the records Lambda must retry."""
        records = _records_of(event, self.source.name)
        identifiers = [self.source.identify(raw) for raw in records]
        missing = [str(n) for n, identifier in enumerate(identifiers) if identifier is None]
        if missing:
            logger.error(
                "batch rejected: source=%s records=%s have no identifier, so they cannot be "
                "reported alone; every record of the batch is reported failed instead",
                self.source.name,
                ",".join(missing),
            )
            return _response(_unique(i for i in identifiers if i is not None))
        bound = as_lambda_context(context) or current_lambda_context.get()
        token = current_lambda_context.set(bound)
        try:
            lanes, ordered = self.source.plan(records, self.max_concurrency)
            run = _Run(
                self,
                records,
                identifiers=cast(list[str], identifiers),
                context=context,
                bound=bound,
                ordered=ordered,
            )
            if self.is_async:
                _run_coroutine(run.run_lanes_async(lanes))
            else:
                run.run_lanes(lanes)
            return _response(run.failed_identifiers())
        finally:
            current_lambda_context.reset(token)


_NOT_RUN = "NOT_RUN"
_OK = "OK"


class _Run(Generic[RecordT]):
    """One batch: its records, the outcome of each, and whether the batch stopped."""

    def __init__(
        self,
        processor: _Processor[RecordT],
        records: list[Mapping[str, Any]],
        *,
        identifiers: list[str],
        context: Any,
        bound: LambdaContextLike | None,
        ordered: bool,
    ) -> None:
        self.p = processor
        self.records = records
        self.identifiers = identifiers
        self.context = context
        self.lease_context = bound or processor.config.bound_context()
        self.prefix = processor.key_prefix or _default_prefix(processor.function)
        self.disabled = idempotency_disabled()
        if self.disabled:
            decision = Decision(Outcome.DISABLED, processor.call.function_name)
            report(decision, processor.config.decision_hook)
        self.outcomes: list[str] = [_NOT_RUN] * len(records)
        self.ordered = ordered
        self._stopped: str | None = None
        self._lock = threading.Lock()

    # --- running lanes -------------------------------------------------------------------------

    def run_lanes(self, lanes: list[list[int]]) -> None:
        workers = min(self.p.max_concurrency, len(lanes))
        if workers <= 1:
            for lane in lanes:
                self._run_lane(lane)
            return
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers, thread_name_prefix="idempotent-batch") as pool:
            futures = [
                pool.submit(contextvars.copy_context().run, self._run_lane, lane) for lane in lanes
            ]
            for future in futures:
                future.result()

    def _run_lane(self, lane: list[int]) -> None:
        for index in lane:
            if self._may_start(index):
                self._finish(index, self._process(index))

    async def run_lanes_async(self, lanes: list[list[int]]) -> None:
        workers = min(self.p.max_concurrency, len(lanes))
        if workers <= 1:
            for lane in lanes:
                await self._run_lane_async(lane)
            return
        slots = asyncio.Semaphore(workers)

        async def lane_task(lane: list[int]) -> None:
            async with slots:
                await self._run_lane_async(lane)

        await asyncio.gather(*(lane_task(lane) for lane in lanes))

    async def _run_lane_async(self, lane: list[int]) -> None:
        for index in lane:
            if self._may_start(index):
                self._finish(index, await self._process_async(index))

    # --- one record ----------------------------------------------------------------------------

    def _process(self, index: int) -> BaseException | None:
        """Run record ``index``; return the error that failed it, or None."""
        body_errors: list[BaseException] = []
        try:
            record, invocation = self._prepare(index)
            function = cast(Callable[[Any, Any], object], self.p.function)

            def body() -> object:
                try:
                    return function(record, self.context)
                except BaseException as exc:
                    body_errors.append(exc)
                    raise

            if invocation is None:
                body()
            else:
                run_sync(self.p.call.flow(invocation), body)
        except Exception as exc:
            return _failure(exc, body_errors)
        return None

    async def _process_async(self, index: int) -> BaseException | None:
        body_errors: list[BaseException] = []
        try:
            record, invocation = self._prepare(index)
            function = cast(Callable[[Any, Any], Awaitable[object]], self.p.function)

            async def body() -> object:
                try:
                    return await function(record, self.context)
                except BaseException as exc:
                    body_errors.append(exc)
                    raise

            if invocation is None:
                await body()
            else:
                await run_async(self.p.call.flow(invocation), body)
        except Exception as exc:
            return _failure(exc, body_errors)
        return None

    def _prepare(self, index: int) -> tuple[RecordT, Invocation | None]:
        """Return the typed record and its identity (None: run without idempotency)."""
        raw = self.records[index]
        source, config = self.p.source, self.p.config
        record = source.parse(raw)
        if self.disabled:
            return record, None
        functions = config._make_functions()
        options = jmespath.Options(custom_functions=functions)
        if config._key_expression is None:
            material = source.default_key(raw)
        else:
            material = _search(config._key_expression, raw, options, "event_key_jmespath")
        validated = None
        if config._validation_expression is not None:
            validated = _search(
                config._validation_expression, raw, options, "payload_validation_jmespath"
            )
        invocation = build_invocation(
            config,
            material=material,
            validated=validated,
            prefix=self.prefix,
            now_ms=self.p.store.clock.now_ms(),
            context=self.lease_context,
        )
        parsed = getattr(functions, "_last_json", None)
        if source.adopt_json is not None and parsed is not None:
            source.adopt_json(record, parsed[0], parsed[1])
        if invocation is None:
            report(Decision(Outcome.SKIPPED, self.p.call.function_name), config.decision_hook)
        return record, invocation

    # --- bookkeeping ---------------------------------------------------------------------------

    def _may_start(self, index: int) -> bool:
        """Tell whether record ``index`` may start; if not, mark it not processed."""
        reason = self._stopped
        if reason is None:
            left = remaining_ms(self.lease_context)
            if left is not None and left < self.p.margin_ms:
                reason = self._stop(
                    "time_budget", f"{left} ms left, below the {self.p.margin_ms} ms margin"
                )
        if reason is None:
            return True
        self.outcomes[index] = reason
        logger.info(
            "batch record not processed: source=%s id=%s reason=%s",
            self.p.source.name,
            self.identifiers[index],
            reason,
            extra={"idempotency_batch": self._fields(index, reason=reason)},
        )
        return False

    def _finish(self, index: int, error: BaseException | None) -> None:
        if error is None:
            self.outcomes[index] = _OK
            return
        self.outcomes[index] = type(error).__name__
        logger.warning(
            "batch record failed: source=%s id=%s error=%s",
            self.p.source.name,
            self.identifiers[index],
            type(error).__name__,
            extra={"idempotency_batch": self._fields(index, error=type(error).__name__)},
        )
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("batch record %s failed", self.identifiers[index], exc_info=error)
        if self.ordered:
            self._stop("after_failure", f"record {self.identifiers[index]} failed")

    def _stop(self, reason: str, why: str) -> str:
        with self._lock:
            if self._stopped is None:
                self._stopped = reason
                left = sum(1 for outcome in self.outcomes if outcome == _NOT_RUN)
                logger.warning(
                    "batch stopped: source=%s reason=%s (%s); records left: %d",
                    self.p.source.name,
                    reason,
                    why,
                    left,
                )
            return self._stopped

    def _fields(self, index: int, **extra: str) -> dict[str, Any]:
        return {"source": self.p.source.name, "id": self.identifiers[index], **extra}

    def failed_identifiers(self) -> list[str]:
        return _unique(
            identifier
            for identifier, outcome in zip(self.identifiers, self.outcomes, strict=True)
            if outcome != _OK
        )


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


def _default_prefix(function: Callable[..., Any]) -> str:
    """Return the default key prefix; a callable object is named by its class."""
    if hasattr(function, "__qualname__") and hasattr(function, "__module__"):
        return default_prefix(function)
    return default_prefix(type(function))


def _search(expression: Any, raw: Any, options: jmespath.Options, name: str) -> Any:
    try:
        return expression.search(raw, options=options)
    except Exception as exc:  # JMESPath errors, and bad JSON/base64/gzip met by the built-ins
        raise IdempotencyKeyError(f"{name} could not be evaluated: {type(exc).__name__}") from exc


def _records_of(event: Any, source: str) -> list[Any]:
    if not isinstance(event, Mapping):
        raise MalformedEventError(
            f"a {source} batch handler needs an event with a Records list, "
            f"got a {type(event).__name__}"
        )
    records = event.get("Records")
    if not isinstance(records, list):
        raise MalformedEventError(
            f"a {source} batch handler needs an event with a Records list; this one has "
            f"{'no Records' if records is None else 'Records of type ' + type(records).__name__}"
        )
    return records


def _response(identifiers: Sequence[str]) -> PartialBatchResponse:
    return {"batchItemFailures": [{"itemIdentifier": i} for i in identifiers]}


def _unique(identifiers: Any) -> list[str]:
    return list(dict.fromkeys(identifiers))


def _run_coroutine(coroutine: Awaitable[None]) -> None:
    """Run ``coroutine`` to completion from synchronous code, even under a running loop."""

    async def main() -> None:
        await coroutine

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(main())
        return
    # Called from inside an event loop (a test, a local runner): run in a fresh loop elsewhere.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="idempotent-batch-loop") as pool:
        pool.submit(contextvars.copy_context().run, asyncio.run, main()).result()
