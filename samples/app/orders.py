"""The order as the three functions share it: id derivation, statuses, the stored item."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any, Final

#: Fixed forever: changing it would give a retried request a different order id.
ORDER_ID_NAMESPACE: Final = uuid.UUID("6f1c2a52-3f57-4c58-9d0e-2d8f0b1f7a11")

#: The event CreateOrder emits through the outbox, and the source the bus's rule matches.
ORDER_CREATED: Final = "OrderCreated"
EVENT_SOURCE: Final = "orders"

#: The key prefixes of the functions that emit (CreateOrder's `KEY_PREFIX`): PublishEvents and
#: SweepOutbox serve their outbox items only, as template.yaml's grants and stream filter do.
OUTBOX_KEY_PREFIXES: Final = ("orders.create_order",)

PENDING: Final = "PENDING"
PAID: Final = "PAID"

#: Orders age out of the table after a year (TTL on ``expires_at``); the totals keep them.
ORDER_RETENTION_SECONDS: Final = 365 * 24 * 3600

CENT: Final = Decimal("0.01")


def order_id_for(idempotency_key: str, caller: str | None) -> str:
    """Derive the order id from the request's idempotency key and caller, deterministically.

    A retry of the same request names the same order even after its idempotency record has
    expired, so the conditional put that creates the order can never create a second one.
    """
    name = f"{caller or '-'}\n{idempotency_key}"
    return f"ord_{uuid.uuid5(ORDER_ID_NAMESPACE, name).hex}"


def money(amount: Decimal) -> str:
    """Format an amount for JSON: a string with two decimals (no float rounding)."""
    return str(amount.quantize(CENT))


def order_view(item: dict[str, Any]) -> dict[str, Any]:
    """Return the public JSON form of a stored order item."""
    return {
        "order_id": item["order_id"],
        "customer_id": item["customer_id"],
        "status": item["status"],
        "currency": item["currency"],
        "total": money(Decimal(item["total"])),
        "items": [
            {
                "sku": line["sku"],
                "quantity": int(line["quantity"]),
                "unit_price": money(Decimal(line["unit_price"])),
            }
            for line in item["items"]
        ],
        "created_at": int(item["created_at"]),
    }
