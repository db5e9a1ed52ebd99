"""The transactional outbox: a state change and the events that announce it, both or neither.

Inside any idempotent body (`idempotent`, `idempotent_function`, every batch adapter's record
handler, `idempotent_lambda.durable.step`), `emit` queues an event. It is written as an item of
the idempotency table in the same ``TransactWriteItems`` as the COMPLETED record and the body's
`idempotent_lambda.transaction.current_transaction` writes:

```python
from idempotent_lambda import idempotent
from idempotent_lambda.outbox import emit
from idempotent_lambda.transaction import current_transaction

@idempotent(persistence_store=store, config=config)
def handler(event, context):
    current_transaction().put("orders", {"pk": event["order_id"], "state": "created"})
    emit("OrderCreated", {"order_id": event["order_id"]}, source="shop.orders")
    return {"order_id": event["order_id"]}
```

`publish_handler` is the Lambda handler of the table's DynamoDB Stream that puts those events
on EventBridge. Every published event carries its id at ``detail.outbox.id``, where
`idempotent_lambda.event_keys.OUTBOX_EVENT` finds it for a consumer's idempotency. The Outbox
guide tells the guarantee end to end, its one remaining window, ordering and cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from idempotent_lambda._clock import SYSTEM_CLOCK
from idempotent_lambda.exceptions import IdempotencyConfigError, IdempotencyTransactionError
from idempotent_lambda.outbox._event import (
    DEFAULT_SOURCE,
    MAX_ENTRY_BYTES,
    OutboxEvent,
    detail_text,
    entry_size,
    event_id,
)
from idempotent_lambda.persistence.protocol import MAX_TRANSACTION_WRITES
from idempotent_lambda.transaction import running_transaction

if TYPE_CHECKING:
    from idempotent_lambda.adapters._batch import BatchHandler
    from idempotent_lambda.metrics import EMFMetrics

__all__ = ["DEFAULT_SOURCE", "MAX_EVENTS", "OutboxEvent", "emit", "publish_handler"]

#: The most events one body may emit: a transaction holds 100 writes, one is the record. Each
#: of the body's own `current_transaction` writes takes one of these places.
MAX_EVENTS = MAX_TRANSACTION_WRITES


def emit(
    detail_type: str,
    detail: Mapping[str, Any],
    *,
    source: str | None = None,
    event_bus_name: str | None = None,
) -> str:
    """Queue one event, written with the running body's record; return the event's id.

    The id is derived from the record's key and the event's position in the body (the first
    `emit` is 0), so a rerun of the body emits the same ids; a body that runs unrecorded
    (idempotency off, no key) gets random ids. Nothing is written when the body raises or its
    result is not stored, and a replay runs no body, so it writes nothing.

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
            events together), the event is over EventBridge's 256 KB, ``detail`` is not a JSON
            object, or the store keeps no outbox. Raised here, in the body: nothing is written
            unless the body goes on and returns.
    """
    transaction = running_transaction()
    if transaction is None:
        raise IdempotencyConfigError(
            "outbox.emit() works only inside a function decorated by idempotent_lambda "
            "(idempotent, idempotent_function, an adapter or durable.step), while its body runs"
        )
    for name, value in (("detail_type", detail_type), ("source", source or DEFAULT_SOURCE)):
        if not isinstance(value, str) or not value:
            raise IdempotencyTransactionError(f"emit: {name} must be a non-empty string")
    if event_bus_name is not None and (not isinstance(event_bus_name, str) or not event_bus_name):
        raise IdempotencyTransactionError("emit: event_bus_name must be a non-empty string")
    text = detail_text(detail)
    store = transaction.store
    put = getattr(store, "outbox_put", None)
    if not callable(put):
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
    clock = getattr(store, "clock", SYSTEM_CLOCK)
    event = OutboxEvent(
        event_id=event_id(transaction.record_key, transaction.emitted),
        detail_type=detail_type,
        detail=text,
        source=source or DEFAULT_SOURCE,
        event_bus_name=event_bus_name,
        emitted_at_ms=clock.now_ms(),
    )
    size = entry_size(event.entry(None))
    if size > MAX_ENTRY_BYTES:
        raise IdempotencyTransactionError(
            f"emit: the event is {size} bytes; EventBridge takes at most {MAX_ENTRY_BYTES}"
        )
    transaction.add(put(event, transaction.record_key))
    transaction.emitted += 1
    return event.event_id


def publish_handler(
    persistence_store: Any,
    *,
    events_client: Any = None,
    event_bus_name: str | None = None,
    metrics: EMFMetrics | None = None,
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

    Raises:
        IdempotencyConfigError: The store keeps no outbox items.
    """
    from idempotent_lambda.outbox._publisher import Publisher

    return Publisher(
        persistence_store,
        events_client=events_client,
        default_bus=event_bus_name,
        metrics=metrics,
    )
