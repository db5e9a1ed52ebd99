"""ReserveStock: reserves the stock of each new order, from ``OrderCreated`` events, once each.

``OrderCreated`` reaches this function through EventBridge: the bus's rule sends it to
``OrderEventsQueue``, and the queue's event source mapping delivers it here. Every event the
outbox publishes carries its outbox id, which `event_keys.OUTBOX_EVENT` finds in the message:
that id is the idempotency key. It stays the same when the publisher puts the event again (it
crashed after ``PutEvents`` and before marking the item published), when EventBridge retries a
delivery, and when SQS delivers the message again, so each order reserves its stock once.

The reservation itself is an ``ADD`` per SKU: not safe to repeat, which is why it runs under the
idempotency record. The ``ADD``s are queued on `current_transaction`, so they commit with the
record in one ``TransactWriteItems`` (at most 50 lines an order, plus the record: within the 100
writes of a transaction), and a failure never leaves half an order reserved. Failures are per
message (``batchItemFailures``); after the queue's ``maxReceiveCount`` a message lands in
``OrderEventsDeadLetterQueue``.
"""

from __future__ import annotations

import time
from typing import Any

from idempotent_lambda import event_keys
from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler
from idempotent_lambda.transaction import current_transaction

from .aws import env, idempotency_store, record_expiry_seconds
from .observability import idempotency_config, logger, metrics
from .orders import ORDER_CREATED

#: This function's records and large results: template.yaml grants its IAM on this prefix.
KEY_PREFIX = "orders.reserve_stock"


class EventError(Exception):
    """The event cannot be applied; the message is reported failed and retried."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        logger.warning("event not applied: %s", reason)  # the batch log names only the class


@logger.inject_lambda_context
@metrics.log_metrics
@idempotent_sqs_handler(
    persistence_store=idempotency_store(KEY_PREFIX),
    config=idempotency_config(
        event_key_jmespath=event_keys.OUTBOX_EVENT,
        raise_on_no_idempotency_key=True,
        expires_after_seconds=record_expiry_seconds(),
    ),
    key_prefix=KEY_PREFIX,
)
def handler(record: SQSRecord, context: Any) -> dict[str, Any]:
    """Add the order's quantities to the reserved stock of each SKU; return what was reserved."""
    event = record.json_body
    if not isinstance(event, dict) or event.get("detail-type") != ORDER_CREATED:
        raise EventError("message is not an OrderCreated event")
    order = event.get("detail")
    if not isinstance(order, dict) or not isinstance(order.get("items"), list):
        raise EventError("OrderCreated has no items")
    reserved: dict[str, int] = {}
    for line in order["items"]:
        reserved[str(line["sku"])] = reserved.get(str(line["sku"]), 0) + int(line["quantity"])
    transaction, table, now = current_transaction(), env("STOCK_TABLE"), int(time.time())
    for sku, quantity in sorted(reserved.items()):
        transaction.update(
            table,
            {"sku": sku},
            "ADD reserved :quantity SET updated_at = :now",
            values={":quantity": quantity, ":now": now},
        )
    return {"order_id": order.get("order_id"), "reserved": reserved}
