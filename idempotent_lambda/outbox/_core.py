"""The outbox's working parts: `emit`, the publisher's and the sweeper's handlers, the sweeper.

`idempotent_lambda.outbox` re-exports the public names; its docstring tells the whole path.

The sweeper publishes the outbox events no stream record brought, found by age in an index. A
stream keeps its records for 24 hours; a mapping stuck longer, or a stream switched off,
leaves items that no record will ever bring to the publisher. Every item carries
``outbox_pending`` until its mark, so the sparse index on it holds the unpublished items only:
reading a bounded page of it per run costs the same whatever the table holds.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from idempotent_lambda._outbox_format import (
    AWS_SOURCE_PREFIX,
    DEFAULT_SOURCE,
    MAX_DETAIL_TYPE,
    MAX_ENTRY_BYTES,
    MAX_SOURCE,
    OUTBOX_INDEX,
    TRACE_RESERVE_BYTES,
    OutboxEvent,
    detail_text,
    entry_size,
    event_id,
    slot,
)
from idempotent_lambda._tracing import current_traceparent
from idempotent_lambda.exceptions import IdempotencyConfigError, IdempotencyTransactionError
from idempotent_lambda.persistence.protocol import MAX_TRANSACTION_WRITES, OutboxStore
from idempotent_lambda.transaction import running_transaction

if TYPE_CHECKING:
    from idempotent_lambda.adapters._batch import BatchHandler
    from idempotent_lambda.metrics import EMFMetrics
    from idempotent_lambda.outbox._publisher import Publisher


logger = logging.getLogger("idempotent_lambda.outbox")

#: The most events one body may emit: a transaction holds 100 writes, one is the record. Each
#: of the body's own `current_transaction` writes takes one of these places.
MAX_EVENTS = MAX_TRANSACTION_WRITES


#: The event source mapping's filter pattern for the publisher: new outbox items only (it reads
#: ``NewImage``, so the stream's view is ``NEW_IMAGE`` or ``NEW_AND_OLD_IMAGES``).
STREAM_FILTER_PATTERN: Mapping[str, Any] = {
    "eventName": ["INSERT"],
    "dynamodb": {"NewImage": {"outbox_id": {"S": [{"exists": True}]}}},
}


def emit(
    detail_type: str,
    detail: Mapping[str, Any],
    *,
    source: str | None = None,
    event_bus_name: str | None = None,
) -> str:
    """Queue one event, written with the running body's record; return the event's id.

    The event's item lies under the record's key, in a slot drawn from the claim (its owner
    token) and the event's position in the body, and its id is computed from that key: nobody
    who cannot write the record's keys can predict it. A body replayed under the same claim (a
    durable execution's) emits the same ids; a body run again under a new claim (its record
    expired, or its earlier run raised and wrote nothing) emits new events. A body run without
    a record (idempotency off, no key) writes under its function's key prefix, with random ids.
    Nothing is written when the body raises or its result is not stored, and a replay runs no
    body, so it writes nothing.

    Args:
        detail_type: EventBridge ``DetailType``.
        detail: A JSON object (numbers may be ``Decimal``); the publisher adds the id under
            ``outbox``, so that field is reserved.
        source: EventBridge ``Source``; default `DEFAULT_SOURCE`.
        event_bus_name: Bus name or ARN; default: the publisher's (``event_bus_name`` of
            `publish_handler`, else the account's default bus).

    Raises:
        IdempotencyConfigError: No idempotent body is running here.
        IdempotencyTransactionError: The transaction is full (at most `MAX_EVENTS` writes and
            events together); EventBridge would refuse the event (a detail type over 128
            characters, a source over 256 or starting with ``aws.``, an entry over 256 KB once
            the publisher adds the id and a trace context); ``detail`` is not a JSON object; or
            the store keeps no outbox. Raised here, in the body: nothing is written
            unless the body goes on and returns.
    """
    transaction = running_transaction()
    if transaction is None:
        raise IdempotencyConfigError(
            "outbox.emit() works only inside a function decorated by idempotent_lambda "
            "(idempotent, idempotent_function, an adapter or durable.step), while its body runs"
        )
    source = DEFAULT_SOURCE if source is None else source
    _check_names(detail_type, source, event_bus_name)
    text = detail_text(detail)
    store = transaction.store
    if not isinstance(store, OutboxStore):
        raise IdempotencyTransactionError(
            f"emit: {type(store).__name__} keeps no outbox; use DynamoDBPersistenceLayer "
            "(or InMemoryPersistenceLayer in tests)"
        )
    if len(transaction) >= MAX_EVENTS:
        raise IdempotencyTransactionError(
            f"emit: the transaction is full ({len(transaction)} writes and events): a body may "
            f"emit at most {MAX_EVENTS} events, fewer by each write of its own, because one "
            "TransactWriteItems holds 100 items and one is the idempotency record"
        )
    if transaction.claim is None:  # a body run without a record: its events are its own
        transaction.claim = uuid.uuid4().hex
    owner_key = transaction.record_key or transaction.key_prefix
    key = store.outbox_item_key(owner_key, slot(transaction.claim, transaction.emitted))
    event = OutboxEvent(
        event_id=event_id(key),
        detail_type=detail_type,
        detail=text,
        source=source,
        event_bus_name=event_bus_name,
        emitted_at_ms=store.clock.now_ms(),
        trace_parent=current_traceparent(),
    )
    # the publisher sends a trace context of its own (at most 72 bytes), whether or not one
    # is stored: size the entry without the stored one, then add the most it may take
    untraced = dataclasses.replace(event, trace_parent=None).entry(None)
    size = entry_size({**untraced, "EventBusName": None})
    if size + TRACE_RESERVE_BYTES > MAX_ENTRY_BYTES:
        raise IdempotencyTransactionError(
            f"emit: the event is {size} bytes with its id, and a publisher may add "
            f"{TRACE_RESERVE_BYTES} more (its trace context); EventBridge takes at most "
            f"{MAX_ENTRY_BYTES}"
        )
    transaction.add(store.outbox_put(event, key, transaction.key_prefix))
    transaction.emitted += 1
    return event.event_id


def _check_names(detail_type: object, source: object, event_bus_name: object) -> None:
    """Refuse what EventBridge never accepts as a detail type, source or bus name."""
    for name, value, most in (
        ("detail_type", detail_type, MAX_DETAIL_TYPE),
        ("source", source, MAX_SOURCE),
    ):
        if not isinstance(value, str) or not value:
            raise IdempotencyTransactionError(f"emit: {name} must be a non-empty string")
        if len(value) > most:
            raise IdempotencyTransactionError(
                f"emit: {name} is {len(value)} characters; EventBridge takes at most {most}"
            )
    if str(source).startswith(AWS_SOURCE_PREFIX):
        raise IdempotencyTransactionError(
            f"emit: a source starting with {AWS_SOURCE_PREFIX!r} is AWS's own: EventBridge "
            "refuses it from PutEvents"
        )
    if event_bus_name is not None and (not isinstance(event_bus_name, str) or not event_bus_name):
        raise IdempotencyTransactionError("emit: event_bus_name must be a non-empty string")


def publish_handler(
    persistence_store: Any,
    *,
    events_client: Any = None,
    event_bus_name: str | None = None,
    metrics: EMFMetrics | None = None,
    key_prefixes: Sequence[str] | None = None,
) -> BatchHandler:
    """Return the Lambda handler of the table's stream that publishes outbox events.

    Point an event source mapping of the idempotency table's stream (``NEW_IMAGE`` or
    ``NEW_AND_OLD_IMAGES``) at it, with ``ReportBatchItemFailures`` and, to spare it every
    other record, a filter on outbox keys (the Outbox guide has it). It ignores records that
    are not outbox items, reads the current state of those that are in one consistent
    ``BatchGetItem``, sends the unpublished ones with ``PutEvents`` (up to 10 entries a
    request, failed entries retried), marks each published with a conditional ``UpdateItem``
    and answers with ``batchItemFailures``: an event that cannot be published fails its own
    record (and, by the stream's checkpoint, those after it, which are then skipped as
    published when they come again).

    Args:
        persistence_store: The `DynamoDBPersistenceLayer` the functions emit with.
        events_client: A ``boto3`` ``events`` client; else one is built on first use.
        event_bus_name: The bus of events emitted without one (default: the default bus).
        metrics: Where the outbox metrics go (default: EMF on stdout, namespace
            ``idempotent_lambda``).
        key_prefixes: The key prefixes it serves (``static_pk_value`` in composite-key mode):
            an item is served when its partition value is one of them or starts with one and
            ``#``, as a ``dynamodb:LeadingKeys`` grant on ``<prefix>#*`` reads it. A record of
            any other item is done at once, never published. None: every prefix of the table.

    Raises:
        IdempotencyConfigError: The store keeps no outbox items, or ``key_prefixes`` is not a
            sequence of non-empty strings.
    """
    from idempotent_lambda.outbox._publisher import Publisher

    return Publisher(
        persistence_store,
        events_client=events_client,
        default_bus=event_bus_name,
        metrics=metrics,
        key_prefixes=key_prefixes,
    )


def sweep_handler(
    persistence_store: Any,
    *,
    events_client: Any = None,
    event_bus_name: str | None = None,
    metrics: EMFMetrics | None = None,
    key_prefixes: Sequence[str] | None = None,
    min_age_seconds: int = 300,
    limit: int = 100,
    index_name: str = OUTBOX_INDEX,
) -> Sweeper:
    """Return the scheduled Lambda handler that publishes events the stream did not bring.

    Every outbox item carries ``outbox_pending`` until it is published, the key of the sparse
    index `OUTBOX_INDEX` (``outbox_pending`` and ``outbox_emitted_at``, keys only). Each run
    reads at most ``limit`` entries of each of its prefixes' `PENDING_SHARDS` index partitions,
    oldest first (one ``Query`` each; a ``Scan`` of the index, with the same limit, when it
    serves every prefix), and publishes the items older than ``min_age_seconds`` through
    the publisher's own path (consistent read, ``PutEvents``, mark). It prints the age metric
    (`AGE_METRIC`) of the oldest unpublished item it saw, so an event the stream lost
    (a stream off, a mapping stuck past 24 hours) is measured and published. Schedule it every
    few minutes (the Outbox guide, "Publish what the stream lost").

    Args:
        persistence_store: The `DynamoDBPersistenceLayer` the functions emit with.
        events_client: As `publish_handler`'s.
        event_bus_name: As `publish_handler`'s.
        metrics: As `publish_handler`'s.
        key_prefixes: As `publish_handler`'s; each prefix's index partitions are queried.
        min_age_seconds: Younger items are left to the stream's publisher.
        limit: Index entries read per partition (per page of the ``Scan``) and run.
        index_name: The index's name.

    Returns:
        The handler; it answers with the run's counts (``found``, ``published``, ``failed``,
        ``oldest_age_seconds``).

    Raises:
        IdempotencyConfigError: The store keeps no outbox items, or an argument is not usable.
    """
    from idempotent_lambda.outbox._publisher import Publisher

    publisher = Publisher(
        persistence_store,
        events_client=events_client,
        default_bus=event_bus_name,
        metrics=metrics,
        key_prefixes=key_prefixes,
    )
    return Sweeper(publisher, min_age_seconds=min_age_seconds, limit=limit, index_name=index_name)


#: The most index entries one run reads per partition (a ``Query`` returns at most 1 MB anyway).
MAX_LIMIT = 1000


class Sweeper:
    """The handler `idempotent_lambda.outbox.sweep_handler` returns; call it on a schedule."""

    def __init__(
        self, publisher: Publisher, *, min_age_seconds: int, limit: int, index_name: str
    ) -> None:
        if isinstance(min_age_seconds, bool) or not isinstance(min_age_seconds, int):
            raise IdempotencyConfigError("min_age_seconds must be a whole number of seconds")
        if min_age_seconds < 0:
            raise IdempotencyConfigError("min_age_seconds must not be negative")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise IdempotencyConfigError(f"limit must be a whole number from 1 to {MAX_LIMIT}")
        if not isinstance(index_name, str) or not index_name:
            raise IdempotencyConfigError("index_name must be a non-empty string")
        self.publisher = publisher
        self.min_age_ms = min_age_seconds * 1000
        self.limit = limit
        self.index_name = index_name

    def __call__(self, event: Any = None, context: Any = None) -> dict[str, Any]:
        """Publish the unpublished events older than the minimum age; return the run's counts.

        Raises:
            IdempotencyPersistenceLayerError: The index could not be read (missing, denied):
                the invocation fails, so the function's error metric shows it.
        """
        from idempotent_lambda.outbox._publisher import _deadline

        store = self.publisher.store
        found = store.outbox_pending_keys(self.index_name, self.publisher.key_prefixes, self.limit)
        now_ms = store.clock.now_ms()
        due = [key for key, emitted in found if emitted <= now_ms - self.min_age_ms]
        oldest_ms = found[0][1] if found else now_ms  # nothing waits: the age is 0
        failed = self.publisher.publish_keys(due, _deadline(context), oldest_ms)
        if due:
            logger.warning(
                "outbox sweep: %d unpublished events older than %d s were published "
                "from the index (%d failed); the stream did not bring them",
                len(due) - len(failed),
                self.min_age_ms // 1000,
                len(failed),
            )
        return {
            "found": len(found),
            "due": len(due),
            "failed": len(failed),
            "oldest_age_seconds": max(0, now_ms - oldest_ms) // 1000,
        }
