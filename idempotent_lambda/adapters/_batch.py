"""The batch loop shared by the SQS and DynamoDB Stream adapters.

One call of a batch handler reads the event's ``Records``, plans which records must keep their
order, runs each record through the idempotency state machine and answers with Lambda's partial
batch response, ``{"batchItemFailures": [{"itemIdentifier": ...}, ...]}``: the records to retry.

Rules both sources share:

- A problem with one record (malformed, no key, in progress elsewhere, handler raised, store
  failed) fails that record alone. The batch handler never raises because of a record.
- Ordered sources keep order per *chain* (a FIFO message group, a stream item): its records run
  in batch order, and once one fails the rest of the chain is reported without running. Other
  chains go on. Streams report every record from the first failure on (Lambda's checkpoint).
- Records that share an idempotency key run one after the other in batch order, so a duplicate
  replays the first one's result instead of finding it in progress.
- Time budget: before a record starts, the Lambda context's remaining time is checked; below the
  safety margin the batch stops and the rest is reported, instead of Lambda killing it mid-record.
- Concurrency: each *lane* (the records tied by a chain or a key) runs in order; up to
  ``max_concurrency`` lanes run at once in a thread pool sharing the store's one client (or as
  asyncio tasks for ``async def`` handlers), each bound to the batch's Lambda context. The answer
  is the same as with ``max_concurrency=1``.
- One read: before any record runs, every key is read at once when the store can
  (`BatchReadStore`) and the batch may be a redelivery; COMPLETED records replay from that read.

This module holds the decorator and the types the sources share; the rules live in
`_batch_source` (what a source provides), `_batch_progress` (what is reported), `_batch_records`
(one record's run) and `_batch_lanes` (lanes and concurrency).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar, cast

from idempotent_lambda._engine import IdempotentFunction
from idempotent_lambda._identity import reserve_default_prefix
from idempotent_lambda._lambda_context import as_lambda_context, current_lambda_context
from idempotent_lambda.adapters._batch_lanes import (
    plan_lanes,
    run_coroutine,
    run_lanes,
    run_lanes_async,
)
from idempotent_lambda.adapters._batch_progress import (
    BatchItemFailure,
    BatchProgress,
    PartialBatchResponse,
    partial_response,
    unique,
)
from idempotent_lambda.adapters._batch_records import RecordRunner, prefix_named_by
from idempotent_lambda.adapters._batch_source import BatchSource
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import (
    IdempotencyConfigError,
    IdempotencyError,
    IdempotencyPersistenceLayerError,
)
from idempotent_lambda.persistence.protocol import BatchReadStore, PersistenceStore
from idempotent_lambda.record import IdempotencyRecord, Status
from idempotent_lambda.serialization import resolve_serializer

__all__ = [
    "DEFAULT_MAX_CONCURRENCY",
    "DEFAULT_TIME_SAFETY_MARGIN_MS",
    "BatchHandler",
    "BatchItemFailure",
    "BatchSource",
    "MalformedEventError",
    "MalformedRecordError",
    "PartialBatchResponse",
    "batch_decorator",
]

RecordT = TypeVar("RecordT")

logger = logging.getLogger("idempotent_lambda.batch")

#: Default for ``time_safety_margin_ms``: no record starts with less time than this left.
DEFAULT_TIME_SAFETY_MARGIN_MS = 1_000
#: Default for ``max_concurrency``: lanes run at once. Record handlers are I/O-bound (two store
#: round trips each, plus the handler's own calls), so threads mostly wait: 16 lanes cut a
#: 100-record batch to about 7 sequential record times, while staying well inside the store
#: client's pool of 32 connections (so no lane waits for a connection) and adding little memory.
DEFAULT_MAX_CONCURRENCY = 16


class MalformedEventError(IdempotencyError, ValueError):
    """The event is not a batch at all: not a mapping, or no ``Records`` list.

    Raised by a batch handler (the only error it raises), because such an event means the function
    is wired to the wrong source or invoked by hand; there is no record to report.
    """


class MalformedRecordError(IdempotencyError, ValueError):
    """A record lacks a field its source always sends, or holds one of the wrong type.

    Never raised out of a batch handler: the record is reported failed and logged.
    """


BatchHandler = Callable[[Any, Any], PartialBatchResponse]
"""A Lambda handler ``handler(event, context)`` for a batch event source."""


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
        if key_prefix is None:
            reserve_default_prefix(persistence_store, function, prefix_named_by(function))
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
        self.key_prefix = key_prefix
        self.max_concurrency = max_concurrency
        self.margin_ms = margin_ms
        self.call = IdempotentFunction(
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
            return partial_response(unique(i for i in identifiers if i is not None))
        bound = as_lambda_context(context) or current_lambda_context.get()
        token = current_lambda_context.set(bound)
        try:
            runner = RecordRunner(
                self.source, self.function, self.call, records, context, self.key_prefix
            )
            keys = [runner.key(index) for index in range(len(records))]
            chains = self.source.chains(records)
            lanes = plan_lanes(chains, keys)
            known = self._read_all(records, keys)
            lease_context = bound or self.call.config.bound_context()
            progress = BatchProgress(
                self.source.name,
                cast(list[str], identifiers),
                chains,
                checkpoint=self.source.checkpoint,
                lease_context=lease_context,
                margin_ms=self.margin_ms,
            )

            def stored(index: int) -> IdempotencyRecord | None:
                key = keys[index]
                return None if key is None else known.get(key)

            if self.is_async:

                async def run_record_async(index: int) -> None:
                    if progress.may_start(index):
                        progress.finish(index, await runner.run_async(index, stored(index)))

                run_coroutine(run_lanes_async(lanes, self.max_concurrency, run_record_async))
            else:

                def run_record(index: int) -> None:
                    if progress.may_start(index):
                        progress.finish(index, runner.run(index, stored(index)))

                # A lane that only replays from the batch read makes no store call: threads
                # would only add contention, so such lanes run here first.
                now = self.call.store.clock.now_ms()
                replays = [all(_replayable(stored(index), now) for index in lane) for lane in lanes]
                pairs = list(zip(lanes, replays, strict=True))
                run_lanes([lane for lane, replay in pairs if replay], 1, run_record)
                waiting = [lane for lane, replay in pairs if not replay]
                run_lanes(waiting, self.max_concurrency, run_record)
            return partial_response(progress.failed_identifiers())
        finally:
            current_lambda_context.reset(token)

    def _read_all(self, records: list[Any], keys: list[str | None]) -> dict[str, IdempotencyRecord]:
        """Read every key of the batch at once, when the store can and a redelivery is possible.

        A failed read only costs its round trip: each record then claims as usual.
        """
        store = self.call.store
        wanted = [key for key in dict.fromkeys(keys) if key is not None]
        if not wanted or not isinstance(store, BatchReadStore):
            return {}
        if not self.source.may_be_redelivered(records):
            return {}
        try:
            return store.get_many(wanted)
        except IdempotencyPersistenceLayerError as exc:
            logger.warning(
                "batch read failed: source=%s keys=%d error=%s; each record claims instead",
                self.source.name,
                len(wanted),
                type(exc.__cause__ or exc).__name__,
            )
            return {}


def _replayable(record: IdempotencyRecord | None, now_ms: int) -> bool:
    """Tell whether a record read up front will be replayed without another store call."""
    return (
        record is not None and record.status is Status.COMPLETED and not record.expired_at(now_ms)
    )


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
