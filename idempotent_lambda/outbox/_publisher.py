"""The outbox publisher: a DynamoDB Stream batch in, EventBridge events out, each at least once.

One batch, in order:

1. Records are read as the stream adapter reads them (`DynamoDBStreamRecord`); a malformed one
   fails alone. Records that are not outbox items of the prefixes served (idempotency records,
   REMOVEs, the publisher's own marks when no filter spares it them, other functions' items)
   are done.
2. The outbox items' current state is read in one consistent ``BatchGetItem`` per 100 (one
   key a request when a batch is refused): an event already marked published (a redelivered
   record) or gone (expired) is skipped; one that cannot be read, or read as an event, fails
   its own record. An event's id is computed from its item's key, never read from the item.
3. The rest go out with ``PutEvents``, at most 10 entries and 256 KB a request, in stream
   order. Entries that fail for a transient reason are sent again (`ATTEMPTS` in all, within
   the invocation's time); a request rejected whole is split into single entries, so one bad
   event cannot fail the others.
4. Each published event is marked with a conditional ``UpdateItem`` (``outbox_published_at``).
   A crash between 3 and 4 leaves it unmarked: the next delivery publishes it again, with the
   same id, for the consumer to deduplicate.
5. Unpublished events fail their records; as for every stream, every record from the first
   failure on is reported (Lambda resumes from the lowest). Those that were published are
   skipped at step 2 next time.

Over 400 lines: the spans of a publication (`Publication`) live beside the one path they trace.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from idempotent_lambda._outbox_format import (
    AGE_METRIC,
    OutboxEvent,
    entry_size,
    event_id,
    key_ident,
)
from idempotent_lambda._tracing import links_to_current, tracer
from idempotent_lambda.adapters._batch_lanes import PartialBatchResponse, partial_response
from idempotent_lambda.adapters.dynamodb_stream import SOURCE as STREAM_SOURCE
from idempotent_lambda.adapters.dynamodb_stream import DynamoDBStreamRecord
from idempotent_lambda.exceptions import (
    IdempotencyConfigError,
    IdempotencyCorruptRecordError,
    IdempotencyPersistenceLayerError,
    MalformedRecordError,
)
from idempotent_lambda.metrics import COUNT, SECONDS, EMFMetrics, Metric
from idempotent_lambda.persistence._aws import LazyClient, translate_errors
from idempotent_lambda.persistence.protocol import OutboxReader

if TYPE_CHECKING:
    from opentelemetry.trace import Span

logger = logging.getLogger("idempotent_lambda.outbox")

#: ``PutEvents`` limits: entries and bytes per request.
MAX_ENTRIES, MAX_REQUEST_BYTES = 10, 256 * 1024
#: Sends of one entry at most, and the pause before the second (doubling after).
ATTEMPTS, FIRST_PAUSE_S = 3, 0.1
#: Entry error codes worth sending again; any other fails the entry at once.
TRANSIENT_CODES = frozenset(
    {"ThrottlingException", "InternalFailure", "InternalException", "ServiceUnavailable"}
)
#: No retry starts with less than this left of the invocation.
_MARGIN_MS = 1_000
#: Marks written at once.
_MARK_THREADS = 16
_EVENTS: Mapping[str, Any] = {  # the events client's settings
    "retries": {"total_max_attempts": 3, "mode": "standard"},
    "connect_timeout": 2,
    "read_timeout": 5,
}


class Publisher:
    """The publisher `idempotent_lambda.outbox.publish_handler` returns; call it per batch."""

    def __init__(
        self,
        store: object,
        *,
        events_client: Any = None,
        default_bus: str | None = None,
        metrics: EMFMetrics | None = None,
        key_prefixes: Sequence[str] | None = None,
    ) -> None:
        if not isinstance(store, OutboxReader):
            raise IdempotencyConfigError(
                f"publish_handler needs a DynamoDBPersistenceLayer, not {type(store).__name__}"
            )
        if key_prefixes is not None and (
            isinstance(key_prefixes, str) or not all(isinstance(p, str) and p for p in key_prefixes)
        ):
            raise IdempotencyConfigError(
                "key_prefixes must be a list of non-empty key prefixes (or None: every prefix)"
            )
        self.store: OutboxReader = store
        self.key_prefixes = None if key_prefixes is None else tuple(key_prefixes)
        self.default_bus = default_bus
        self._metrics = metrics
        self._events: LazyClient[Any] = LazyClient(
            "events", client=events_client, session=None, boto_config=None, defaults=_EVENTS
        )

    def __call__(self, event: Any, context: Any = None) -> PartialBatchResponse:
        """Publish one stream batch's outbox events; return the records Lambda must retry."""
        records = STREAM_SOURCE.records(event, "outbox publisher")
        identifiers = [STREAM_SOURCE.identify(raw) for raw in records]
        if any(identifier is None for identifier in identifiers):
            logger.error("outbox batch rejected: a record has no SequenceNumber; all are retried")
            return partial_response([i for i in identifiers if i is not None])
        failed: set[int] = set()
        wanted: list[tuple[int, dict[str, Any]]] = []
        for index, raw in enumerate(records):
            try:
                record = DynamoDBStreamRecord.from_raw(raw)
            except MalformedRecordError as exc:
                logger.error("outbox record malformed: sequence=%s %s", identifiers[index], exc)
                failed.add(index)
                continue
            if record.event_name == "REMOVE":
                continue
            key = self.store.outbox_key(raw["dynamodb"]["Keys"])
            if key is not None and self.serves(key):
                wanted.append((index, key))
        if wanted:
            unpublished = self.publish_keys([key for _, key in wanted], _deadline(context))
            failed.update(index for index, key in wanted if key_ident(key) in unpublished)
        if not failed:
            return partial_response([])
        first = min(failed)  # the stream's checkpoint: everything from there on comes again
        return partial_response([str(i) for i in identifiers[first:]])

    def serves(self, key: Mapping[str, Any]) -> bool:
        """Tell whether the item at ``key`` (an outbox item's) lies under a prefix it serves."""
        if self.key_prefixes is None:
            return True
        partition = self.store.outbox_partition(key)
        return any(partition == p or partition.startswith(p + "#") for p in self.key_prefixes)

    def publish_keys(
        self,
        keys: Sequence[Mapping[str, Any]],
        deadline: float | None,
        oldest_ms: int | None = None,
    ) -> set[str]:
        """Publish the items at ``keys`` not yet published; return those that failed.

        Failures are given by `key_ident`. ``oldest_ms`` is the emit time of the oldest
        unpublished item seen elsewhere (the sweeper's index), for the age metric.
        """
        wanted = {key_ident(key): key for key in keys}
        events, unreadable = self.store.outbox_items(list(wanted.values()))
        pending: list[OutboxEvent] = []
        where: dict[str, str] = {}  # event id -> its key's ident
        failed: set[str] = set(unreadable)
        skipped = 0
        for ident, key in wanted.items():
            error = unreadable.get(ident)
            if isinstance(error, IdempotencyCorruptRecordError):
                logger.error("outbox item unreadable: event=%s %s", event_id(key), error)
                continue
            if error is not None:
                logger.error(
                    "outbox item not read: event=%s error=%s", event_id(key), _cause(error)
                )
                continue
            event = events.get(ident)
            if event is None or event.published_at_ms is not None:
                skipped += 1  # published, or expired or deleted: nothing left to publish
                continue
            pending.append(event)
            where[event.event_id] = ident
        published, errors = self.publish(pending, deadline)
        for identity, code in errors.items():
            logger.error("outbox event not published: event=%s error=%s", identity, code)
        failed.update(where[identity] for identity in errors)
        now_ms = self.store.clock.now_ms()
        unmarked = self._mark(published, now_ms, {e: wanted[where[e]] for e in where})
        self._measure(
            pending,
            len(failed),
            now_ms,
            oldest_ms,
            published=len(published),
            skipped=skipped,
            unmarked=unmarked,
        )
        return failed

    def publish(
        self, events: Sequence[OutboxEvent], deadline: float | None = None
    ) -> tuple[list[OutboxEvent], dict[str, str]]:
        """Put ``events`` on EventBridge (not marking them); return those sent and the errors.

        Args:
            events: The events, in the order to send them.
            deadline: ``time.monotonic()`` after which no retry starts.

        Returns:
            The events EventBridge accepted, and the error code of each one it did not.
        """
        spans = Publication(events, self.default_bus)  # docs/tracing.md: one trace per event
        errors: dict[str, str] = {}
        try:
            return self._send(events, deadline, spans, errors)
        finally:
            spans.end(errors)

    def _send(
        self,
        events: Sequence[OutboxEvent],
        deadline: float | None,
        spans: Publication,
        errors: dict[str, str],
    ) -> tuple[list[OutboxEvent], dict[str, str]]:
        """Build each event's entry (one that cannot be built fails alone), then send them."""
        entries: dict[str, dict[str, Any]] = {}
        for event in events:
            try:
                entries[event.event_id] = event.entry(self.default_bus, spans.traceparent(event))
            except (ValueError, TypeError, RecursionError, OverflowError, OSError) as exc:
                errors[event.event_id] = f"InvalidEntry:{type(exc).__name__}"
        pending = [event for event in events if event.event_id in entries]
        published: list[OutboxEvent] = []
        for attempt in range(ATTEMPTS):
            if not pending:
                break
            if attempt:
                pause = FIRST_PAUSE_S * 2 ** (attempt - 1)
                if deadline is not None and time.monotonic() + pause > deadline:
                    break
                time.sleep(pause)
            retry: list[OutboxEvent] = []
            for chunk in _chunks(pending, entries):
                for event, code in self._put(chunk, entries):
                    if code is None:
                        published.append(event)
                        errors.pop(event.event_id, None)
                        continue
                    errors[event.event_id] = code
                    if code in TRANSIENT_CODES:
                        retry.append(event)
            pending = retry
        return published, errors

    def _put(
        self, chunk: list[OutboxEvent], entries: Mapping[str, Mapping[str, Any]]
    ) -> Iterator[tuple[OutboxEvent, str | None]]:
        """Send one request; yield each event with its error code (None: accepted)."""
        try:
            with translate_errors("EventBridge", "PutEvents"):
                response = self._events.get().put_events(
                    Entries=[entries[event.event_id] for event in chunk]
                )
        except IdempotencyPersistenceLayerError as exc:
            code = _cause(exc)
            if len(chunk) > 1 and code not in TRANSIENT_CODES:
                for event in chunk:  # rejected whole: find the event that is to blame
                    yield from self._put([event], entries)
                return
            for event in chunk:
                yield event, code
            return
        results = response.get("Entries") or []
        for index, event in enumerate(chunk):
            result = results[index] if index < len(results) else {"ErrorCode": "NoResult"}
            yield event, result.get("ErrorCode") or (None if result.get("EventId") else "NoId")

    def _mark(
        self, published: list[OutboxEvent], now_ms: int, keys: Mapping[str, Mapping[str, Any]]
    ) -> int:
        """Mark ``published`` as such; return how many marks failed (logged, not retried).

        An unmarked event was delivered: failing its record would only deliver it again.
        """
        if not published:
            return 0

        def mark(event: OutboxEvent) -> bool:
            try:
                self.store.outbox_mark_published(keys[event.event_id], now_ms)
            except IdempotencyPersistenceLayerError as exc:
                logger.error(
                    "outbox event published but not marked: event=%s error=%s; a redelivery "
                    "of its record publishes it again",
                    event.event_id,
                    _cause(exc),
                )
                return False
            return True

        if len(published) == 1:
            return 0 if mark(published[0]) else 1
        with ThreadPoolExecutor(min(_MARK_THREADS, len(published))) as pool:
            return sum(not ok for ok in pool.map(mark, published))

    def _measure(
        self,
        pending: list[OutboxEvent],
        failed: int,
        now_ms: int,
        oldest_ms: int | None,
        *,
        published: int,
        skipped: int,
        unmarked: int,
    ) -> None:
        """Print the batch's outbox metrics (EMF)."""
        metrics = [
            Metric("OutboxPublished", COUNT, published),
            Metric("OutboxPublishFailed", COUNT, failed),
            Metric("OutboxAlreadyPublished", COUNT, skipped),
        ]
        if unmarked:
            metrics.append(Metric("OutboxMarkFailed", COUNT, unmarked))
        emitted = [event.emitted_at_ms for event in pending]
        if oldest_ms is not None:
            emitted.append(oldest_ms)
        if emitted:
            metrics.append(Metric(AGE_METRIC, SECONDS, max(0, now_ms - min(emitted)) / 1000))
        sink = self._metrics
        if sink is None:
            import os

            sink = self._metrics = EMFMetrics(
                os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "idempotent_lambda"
            )
        sink.put(metrics)


class Publication:
    """The spans of one ``PutEvents`` round of the outbox publisher: one per event.

    Each continues the trace its event was emitted in (the context `emit` stored) and links to
    the publisher's own invocation (an event emitted untraced gets a span under the current
    one); the event goes out carrying the publication span's context, so the consumer's span is
    its child. Without a tracer nothing is made, and each event carries on the context it was
    stored with.
    """

    def __init__(self, events: Sequence[OutboxEvent], bus: str | None) -> None:
        self._spans: dict[str, Span] = {}
        self._parents: dict[str, str] = {}
        found = tracer()
        if found is None:
            return
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        w3c = TraceContextTextMapPropagator()
        links = links_to_current()
        for event in events:
            emitted = event.trace_parent
            span = found.start_span(
                f"outbox publish {event.detail_type}",
                context=None if emitted is None else w3c.extract({"traceparent": emitted}),
                kind=trace.SpanKind.PRODUCER,
                links=None if emitted is None else links,
                attributes={
                    "messaging.operation.type": "send",
                    "messaging.operation.name": "PutEvents",
                    "messaging.destination.name": event.event_bus_name or bus or "default",
                    "messaging.message.id": event.event_id,
                },
            )
            self._spans[event.event_id] = span
            carrier: dict[str, str] = {}
            w3c.inject(carrier, trace.set_span_in_context(span))
            if "traceparent" in carrier:
                self._parents[event.event_id] = carrier["traceparent"]

    def traceparent(self, event: OutboxEvent) -> str | None:
        """Return the context ``event`` goes out with: its publication's, else its own."""
        return self._parents.get(event.event_id, event.trace_parent)

    def end(self, errors: Mapping[str, str]) -> None:
        """End every span; one whose event is in ``errors`` (id: error code) failed."""
        if not self._spans:
            return
        from opentelemetry.trace import Status, StatusCode

        for identity, span in self._spans.items():
            code = errors.get(identity)
            if code is not None:
                span.set_attribute("error.type", code)
                span.set_status(Status(StatusCode.ERROR, code))
            span.end()


def _chunks(
    events: list[OutboxEvent], entries: Mapping[str, Mapping[str, Any]]
) -> Iterator[list[OutboxEvent]]:
    """Split ``events`` into ``PutEvents`` requests: at most 10 entries and 256 KB each."""
    chunk: list[OutboxEvent] = []
    size = 0
    for event in events:
        entry_bytes = entry_size(entries[event.event_id])
        if chunk and (len(chunk) == MAX_ENTRIES or size + entry_bytes > MAX_REQUEST_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(event)
        size += entry_bytes
    if chunk:
        yield chunk


def _deadline(context: Any) -> float | None:
    """Return the ``time.monotonic()`` after which no retry starts; None without a context."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if not callable(remaining):
        return None
    try:
        left_ms = int(remaining())
    except (TypeError, ValueError):
        return None
    return time.monotonic() + (left_ms - _MARGIN_MS) / 1000


def _cause(error: BaseException) -> str:
    """Return the AWS error code behind ``error`` (or its class name)."""
    code = error.error_code if isinstance(error, IdempotencyPersistenceLayerError) else None
    return code or type(error.__cause__ or error).__name__
