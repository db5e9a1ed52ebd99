"""PublishEvents: puts the outbox's events on EventBridge, from the idempotency table's stream.

`create_order` emits ``OrderCreated`` with `outbox.emit`: the event is an outbox item, written in
the same transaction as the order and the idempotency record. This function is the other half:
`outbox.publish_handler` reads those items from ``IDEMPOTENCY_TABLE``'s stream (the template's
filter delivers the outbox items of ``OUTBOX_KEY_PREFIXES`` only, the items its grant lets it
read), puts their events with ``PutEvents`` and marks each item published, so a redelivered
stream record publishes nothing again. It answers with ``batchItemFailures``: an item whose
events could not be put is retried alone.

A crash between ``PutEvents`` and the mark publishes that event again on the retry; its id is
the same, and the consumer (`reserve_stock`) deduplicates on it. What the stream no longer
carries, `sweep_outbox` finds and publishes.
"""

from __future__ import annotations

from idempotent_lambda import outbox

from .aws import events_client, outbox_store
from .observability import logger
from .orders import OUTBOX_KEY_PREFIXES

# Its metrics (OutboxPublished, OutboxOldestUnpublishedAge...) are EMF documents in the
# functions' namespace (POWERTOOLS_METRICS_NAMESPACE) and service, where the alarm watches.
handler = logger.inject_lambda_context(
    outbox.publish_handler(
        outbox_store(), events_client=events_client(), key_prefixes=OUTBOX_KEY_PREFIXES
    )
)
