"""ProjectOrders: keeps per-customer totals from the orders table's stream.

A materialised aggregate updated with ``ADD`` is the textbook case for idempotency: a stream
batch that is delivered again (a retry after a partial failure, a bisected batch, a re-read after
a timeout) would count its orders twice. Each record is processed once per table, item and
sequence number (`idempotent_stream_handler`'s default key), so a re-delivered record replays
instead. Records whose processing fails stop the batch there (``batchItemFailures``), which keeps
each item's changes in order.

TTL removals (old orders ageing out of the table) are skipped: the totals are lifetime totals.
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

from idempotent_lambda.adapters.dynamodb_stream import (
    DynamoDBStreamRecord,
    idempotent_stream_handler,
)

from .aws import customer_totals_table, idempotency_store, record_expiry_seconds
from .observability import idempotency_config, logger, metrics
from .orders import PAID

#: This function's records and large results: template.yaml grants its IAM on this prefix.
KEY_PREFIX = "orders.project_orders"


def totals_delta(record: DynamoDBStreamRecord) -> dict[str, Decimal]:
    """Return what one change of an order adds to its customer's totals (empty: nothing).

    A new order counts as ordered; an order becoming PAID counts as paid; an order deleted by a
    user (a cancellation) is taken back out. Totals are kept per currency.
    """
    old, new = record.old_image or {}, record.new_image or {}
    delta: dict[str, Decimal] = {}

    def add(prefix: str, image: dict[str, Any], sign: int) -> None:
        currency = str(image["currency"])
        delta[f"{prefix}_count"] = delta.get(f"{prefix}_count", Decimal(0)) + sign
        amount_field = f"{prefix}_total_{currency}"
        delta[amount_field] = delta.get(amount_field, Decimal(0)) + sign * image["total"]

    if record.event_name == "INSERT":
        add("ordered", new, +1)
        if new.get("status") == PAID:
            add("paid", new, +1)
    elif record.event_name == "MODIFY":
        if old.get("status") != PAID and new.get("status") == PAID:
            add("paid", new, +1)
    elif record.event_name == "REMOVE" and not record.is_ttl_removal:
        add("ordered", old, -1)
        if old.get("status") == PAID:
            add("paid", old, -1)
    return delta


@logger.inject_lambda_context
@metrics.log_metrics
@idempotent_stream_handler(
    persistence_store=idempotency_store(KEY_PREFIX),
    # At least a day (IdempotencyExpiryDays >= 1), longer than the mapping's
    # MaximumRecordAgeInSeconds (6 h): every re-delivery is caught.
    config=idempotency_config(expires_after_seconds=record_expiry_seconds()),
    key_prefix=KEY_PREFIX,
)
def handler(record: DynamoDBStreamRecord, context: Any) -> dict[str, Any]:
    """Add one order change to its customer's totals item."""
    if record.is_ttl_removal:
        return {"skipped": "ttl_removal"}
    delta = totals_delta(record)
    if not delta:
        return {"skipped": "no_change"}
    image = record.new_image or record.old_image or {}
    customer_id = str(image["customer_id"])
    names = {f"#f{n}": field for n, field in enumerate(delta)}
    values: dict[str, Any] = {f":v{n}": value for n, value in enumerate(delta.values())}
    values[":now"] = int(time.time())
    customer_totals_table().update_item(
        Key={"customer_id": customer_id},
        UpdateExpression="ADD "
        + ", ".join(f"#f{n} :v{n}" for n in range(len(delta)))
        + " SET updated_at = :now",
        ExpressionAttributeNames=names,
        ExpressionAttributeValues=values,
    )
    return {"customer_id": customer_id, "applied": {k: str(v) for k, v in delta.items()}}
