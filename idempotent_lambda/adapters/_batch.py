"""The batch adapter every event source shares: a source is a `BatchSource`, the rest is here.

One call of a batch handler reads the event's records, plans which must keep their order, runs
each through the engine and answers with Lambda's partial batch response,
`{"batchItemFailures": [{"itemIdentifier": ...}, ...]}`: the records to retry. The rules:

- A problem with one record (malformed, no key, in progress elsewhere, handler raised, store
  failed) fails that record alone, with a log line; the batch handler raises only
  `MalformedEventError`, for an event that is not a batch at all.
- The records of a *chain* (a FIFO message group, a stream item) run in batch order, and once
  one fails the rest of the chain is reported without running; streams report every record from
  the first failure on (Lambda's checkpoint). Records that share a key run one after the other,
  so a duplicate replays the first one's result. ``def`` handlers run such a lane pipelined
  (claims ahead, completions written behind), ``async def`` ones sequentially: see
  `idempotent_lambda.adapters._batch_lanes`.
- Before a record starts, the Lambda context's remaining time is checked; below the safety
  margin the rest of the batch is reported instead of Lambda killing it mid-record.
- Before any record runs, every key is read at once when the store can (`BatchReadStore`) and
  the batch may be a redelivery; COMPLETED records replay from that read.
- A record's key is scoped to its source (queue, stream, cluster) unless the adapter is told
  `source_scope="shared"`; see `idempotent_lambda.adapters._batch_source`.

A new source declares what sets it apart in a `BatchSource`, and its adapter hands it to
`batch_adapter` (`_batch_exports`), which calls `batch_decorator`:
`idempotent_lambda.adapters.kinesis` is one, in full.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypedDict, TypeVar

from idempotent_lambda._effects import TrackedBody
from idempotent_lambda._engine import idempotency_disabled
from idempotent_lambda._entry import Entry, is_async
from idempotent_lambda._identity import Derive, Invocation, build_invocation
from idempotent_lambda._lambda_context import (
    LambdaContextLike,
    as_lambda_context,
    current_lambda_context,
)
from idempotent_lambda._observability import Outcome
from idempotent_lambda.adapters._batch_completions import (
    CompletionWriter,
    RecordFlow,
    WorkerPools,
)
from idempotent_lambda.adapters._batch_lanes import (
    BatchItemFailure,
    BatchProgress,
    PartialBatchResponse,
    plan_lanes,
    run_pipelined,
    run_sequential,
    unique,
)
from idempotent_lambda.adapters._batch_source import BatchSource, at, check_source_scope
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import (
    IdempotencyConfigError,
    IdempotencyPersistenceLayerError,
    IdempotencyUnstorableResultError,
)
from idempotent_lambda.persistence.protocol import BatchReadStore, PersistenceStore
from idempotent_lambda.record import IdempotencyRecord, Status
from idempotent_lambda.serialization import resolve_serializer

if TYPE_CHECKING:  # typing_extensions: Required and Unpack on Python 3.10 (types only)
    from typing_extensions import Required, Unpack

__all__ = [
    "DEFAULT_MAX_CONCURRENCY",
    "DEFAULT_TIME_SAFETY_MARGIN_MS",
    "BatchHandler",
    "BatchItemFailure",
    "BatchOptions",
    "BatchSource",
    "PartialBatchResponse",
    "at",
    "batch_decorator",
]

RecordT = TypeVar("RecordT")
Raw = Mapping[str, Any]

logger = logging.getLogger("idempotent_lambda.batch")

#: Default for ``time_safety_margin_ms``: no record starts with less time than this left.
DEFAULT_TIME_SAFETY_MARGIN_MS = 1_000
#: Default for ``max_concurrency``: lanes run at once, and store calls a batch's ordered lanes
#: send ahead or behind. Measured under a 5 ms store (docs/benchmarks.md): a 100-record SQS batch
#: takes ~76 ms with 16, ~44 ms with 32, ~26 ms with 64 and no less with 100. Both pools of 64
#: idle threads add ~2.5 MB; the store client keeps a connection for each (see
#: `idempotent_lambda.persistence._aws.MAX_POOL_CONNECTIONS`).
DEFAULT_MAX_CONCURRENCY = 64

BatchHandler = Callable[[Any, Any], PartialBatchResponse]
"""A Lambda handler ``handler(event, context)`` for a batch event source."""


class BatchOptions(TypedDict, total=False):
    """The options every batch decorator takes, by keyword: one list for all four sources.

    ``idempotent_sqs_handler``, ``idempotent_stream_handler``, ``idempotent_kinesis_handler``
    and ``idempotent_kafka_handler`` each declare these as keyword parameters, with their
    defaults.

    Attributes:
        persistence_store: Where records live (required).
        config: Key, validation and expiry settings; the defaults when omitted.
        key_prefix: Replaces the default ``"{function name}.{module}.{qualname}"`` prefix.
        max_concurrency: Lanes run at once (default `DEFAULT_MAX_CONCURRENCY`): records of an
            SQS standard queue, message groups of a FIFO queue, items of a stream, partition
            keys of Kinesis, partitions of Kafka. 1 runs the batch one record at a time.
        time_safety_margin_ms: No record starts with less time left (default
            `DEFAULT_TIME_SAFETY_MARGIN_MS`); 0 turns the check off.
        source_scope: ``"source"`` (default) scopes keys to the event source (the queue, table,
            stream or cluster); ``"shared"`` shares them across sources; ``"powertools"`` gives
            each record the key Powertools' ``BatchProcessor`` with a per-record
            ``@idempotent_function(data_keyword_argument=...)`` stored, so moving from it
            replays what it processed (the migration checklist's batch step).
    """

    persistence_store: Required[PersistenceStore]
    config: IdempotencyConfig | None
    key_prefix: str | None
    max_concurrency: int
    time_safety_margin_ms: int
    source_scope: str


def batch_decorator(
    source: BatchSource[RecordT], **options: Unpack[BatchOptions]
) -> Callable[[Callable[[RecordT, Any], object]], BatchHandler]:
    """Check a batch adapter's options and return the decorator of per-record handlers.

    The options come from a public decorator's signature, which has already refused an unknown
    or missing one.

    Raises:
        IdempotencyConfigError: An option is unusable (at decoration time).
    """
    persistence_store = options["persistence_store"]
    config = options.get("config")
    key_prefix = options.get("key_prefix")
    max_concurrency = options.get("max_concurrency", DEFAULT_MAX_CONCURRENCY)
    time_safety_margin_ms = options.get("time_safety_margin_ms", DEFAULT_TIME_SAFETY_MARGIN_MS)
    source_scope = options.get("source_scope", "source")
    entry = Entry(persistence_store, config, key_prefix)
    scope = check_source_scope(source_scope, entry.config)
    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int):
        raise IdempotencyConfigError("max_concurrency must be an integer >= 1")
    if max_concurrency < 1:
        raise IdempotencyConfigError("max_concurrency must be an integer >= 1")
    margin = time_safety_margin_ms
    if isinstance(margin, bool) or not isinstance(margin, int) or margin < 0:
        raise IdempotencyConfigError("time_safety_margin_ms must be an integer >= 0")

    def decorate(function: Callable[[RecordT, Any], object]) -> BatchHandler:
        if not callable(function):
            raise IdempotencyConfigError("the decorated record handler must be callable")
        handler = _BatchHandler(
            source,
            function,
            entry,
            max_concurrency=max_concurrency,
            margin_ms=margin,
            scope=scope,
        )

        @functools.wraps(function)
        def batch_handler(event: Any, context: Any = None) -> PartialBatchResponse:
            return handler.handle(event, context)

        return batch_handler

    return decorate


class _BatchHandler(Generic[RecordT]):
    """Everything one decorated record handler keeps across batches."""

    def __init__(
        self,
        source: BatchSource[RecordT],
        function: Callable[[RecordT, Any], object],
        entry: Entry,
        *,
        max_concurrency: int,
        margin_ms: int,
        scope: str,
    ) -> None:
        self.source = source
        self.scope = scope
        self.function = function
        self.is_async = is_async(function)
        self.prefix = entry.prefix(function)
        self.store = entry.view()
        self.call = entry.engine(
            function,
            resolve_serializer(None, function),
            adapter=source.name,
            key_prefix=self.prefix,
        )
        self.config = entry.config
        self.margin_ms = margin_ms
        self.pools = WorkerPools(max_concurrency)
        self.completions = CompletionWriter(self.store, self.pools.store_calls)

    def handle(self, event: Any, context: Any) -> PartialBatchResponse:
        """Process one batch and return the records Lambda must retry."""
        source = self.source
        records = source.records(event, source.name)
        identifiers = [source.identify(raw) for raw in records]
        missing = [str(n) for n, identifier in enumerate(identifiers) if identifier is None]
        if missing:
            logger.error(
                "batch rejected: source=%s records=%s have no identifier, so they cannot be "
                "reported alone; every record of the batch is reported failed instead",
                source.name,
                ",".join(missing),
            )
            return source.answer(records, unique(i for i in identifiers if i is not None))
        bound = as_lambda_context(context) or current_lambda_context.get()
        token = current_lambda_context.set(bound)
        try:
            ids = [i for i in identifiers if i is not None]
            return source.answer(records, self._run(event, records, ids, context, bound))
        finally:
            current_lambda_context.reset(token)

    def _run(
        self,
        event: Any,
        records: list[Raw],
        identifiers: list[str],
        context: Any,
        bound: LambdaContextLike | None,
    ) -> list[str]:
        """Run the batch's records; return the identifiers of those to retry."""
        disabled = idempotency_disabled()  # one decision for the whole batch
        if disabled:
            self.call.note(Outcome.DISABLED)
        delivery = _Delivery(event, context, self.prefix(), disabled)
        runs = [_Record(self, delivery, raw) for raw in records]
        keys = [run.key() for run in runs]
        chains = self.source.chains(records)
        lanes = plan_lanes(chains, keys)
        known = self._read_all(records, keys)
        stored = [None if key is None else known.get(key) for key in keys]
        progress = BatchProgress(
            source=self.source.name,
            identifiers=identifiers,
            chains=chains,
            checkpoint=self.source.checkpoint,
            lease_context=bound or self.config.bound_context(),
            margin_ms=self.margin_ms,
        )
        if self.is_async:
            run_sequential(
                lanes, self.pools.workers, progress, lambda i: runs[i].run_async(stored[i])
            )
        else:
            now = self.store.clock.now_ms()
            run_pipelined(
                lanes,
                keys=keys,
                start=lambda index: runs[index].flow(stored[index]),
                replays=[
                    r is not None and r.status is Status.COMPLETED and not r.expired_at(now)
                    for r in stored
                ],
                progress=progress,
                pools=self.pools,
                writer=self.completions,
            )
        return progress.failed_identifiers()

    def _read_all(self, records: list[Raw], keys: list[str | None]) -> dict[str, IdempotencyRecord]:
        """Read every key of the batch at once, when the store can and a redelivery is possible.

        A failed read only costs its round trip: each record then claims as usual.
        """
        store = self.store
        wanted = [key for key in dict.fromkeys(keys) if key is not None]
        if not wanted or not isinstance(store, BatchReadStore):
            return {}
        first = self.source.first_delivery
        if first is not None and all(first(raw) for raw in records):
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


class _Delivery(NamedTuple):
    """What every record of one batch shares."""

    event: Any
    context: Any
    prefix: str
    disabled: bool


class _Record(Generic[RecordT]):
    """One record's run: parsed, and its key material extracted, once, when first needed.

    The invocation (owner, lease, clock reading) is built when the record starts. Without an
    identity (no key material, ``IDEMPOTENCY_DISABLED``) the handler runs unrecorded, inside a
    transaction all the same.
    """

    def __init__(self, batch: _BatchHandler[RecordT], delivery: _Delivery, raw: Raw) -> None:
        self.batch = batch
        self.event, self.context, self.prefix, disabled = delivery
        self.raw = raw
        self.carrier = batch.source.carrier(raw)  # where tracing looks for an outbox event
        self._parsed: tuple[RecordT] | None = None
        self._material: tuple[Any, Any] | None = None
        self.body = TrackedBody(self._handle)
        self.deriver: Derive | None = None if disabled else self.derive

    def parsed(self) -> RecordT:
        """Return the typed record; raises `MalformedRecordError`."""
        if self._parsed is None:
            self._parsed = (self.batch.source.parse(self.raw),)
        return self._parsed[0]

    def _handle(self) -> Any:
        return self.batch.function(self.parsed(), self.context)

    def key(self) -> str | None:
        """Return the record's key; None without one, or when it cannot be read (yet): its run
        then fails it with the same error."""
        if self.deriver is None:
            return None
        try:
            invocation = self.derive(None)
        except Exception:  # reported by the record's own run, which meets it again
            return None
        return None if invocation is None else invocation.key

    def derive(self, lease: LambdaContextLike | None) -> Invocation | None:
        """Return the record's identity (None: run without idempotency)."""
        batch = self.batch
        config = batch.config
        if self._material is None:
            self.parsed()  # a malformed record fails before anything is claimed
            self._material = batch.source.key_material(
                self.event, self.raw, config, scope=batch.scope
            )
        material, validated = self._material
        return build_invocation(
            config,
            material=material,
            validated=validated,
            prefix=self.prefix,
            now_ms=batch.store.clock.now_ms(),
            context=lease,
        )

    def flow(self, known: IdempotencyRecord | None) -> RecordFlow:
        """Start the record's flow (``known``: its record from the batch read), to be carried
        out step by step by its pipelined lane."""
        flow = self.batch.call.enter(self.context, self.deriver, known, carrier=self.carrier)
        return RecordFlow(flow, self.body.run, self.failure)

    async def run_async(self, known: IdempotencyRecord | None) -> BaseException | None:
        """Run the record with an ``async def`` handler (``known``: its record from the batch
        read); return what failed it."""
        try:
            await self.batch.call.acall(
                self.context, self.deriver, self.body.run_async, known=known, carrier=self.carrier
            )
        except Exception as exc:
            return self.failure(exc)
        return None

    def failure(self, exc: BaseException) -> BaseException | None:
        """Return ``exc``; None when it says the record ran and only its result is unstorable."""
        # From the record's own flow, a retry could only raise again: the record is done. Raised
        # by the body itself (a nested call), it is the body's failure like any other.
        if isinstance(exc, IdempotencyUnstorableResultError) and not self.body.raised:
            return None
        return exc
