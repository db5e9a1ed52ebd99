"""CreateOrder: ``POST /orders`` behind an HTTP API, idempotent on the ``Idempotency-Key`` header.

The first request with a key creates the order and answers 201; a retry with the same key and
body gets that same 201 back with ``Idempotent-Replayed: true`` (the handler does not run); the
same key with another body is a 422, a retry while the first still runs a 409, a request without
a key a 400 — all ``application/problem+json``, answered by `idempotent_http`.

The order item is not written by the handler: it is queued on `current_transaction`, and the
library commits it together with the idempotency record's COMPLETED write in one
``TransactWriteItems``. Either both exist — the order and the record that makes every retry
replay the 201 — or neither does, so no crash can leave an order without its record.

Belt and braces: the order id is derived from the key, and the order's put is conditioned on
``attribute_not_exists(order_id)``, so even a retry that arrives after the idempotency record
expired cannot create a second order: its transaction is cancelled (nothing is written) and
`idempotent_http` answers 409 ``Conflict``.

The order announces itself: ``OrderCreated`` is queued with `outbox.emit` and written in that same
transaction, as an outbox item of the idempotency table. The publisher (`publish_events`) puts it
on ``ORDER_EVENTS_BUS`` from the table's stream; a retry that replays the 201 emits nothing again.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from idempotent_lambda import outbox
from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.transaction import current_transaction

from .aws import env, idempotency_store, record_expiry_seconds
from .observability import idempotency_config, logger, metrics
from .orders import (
    EVENT_SOURCE,
    ORDER_CREATED,
    ORDER_RETENTION_SECONDS,
    PENDING,
    order_id_for,
    order_view,
)

KEY_HEADER = "Idempotency-Key"

#: This function's records and large results: template.yaml grants its IAM on this prefix.
KEY_PREFIX = "orders.create_order"


class OrderLine(BaseModel):
    """One line of an order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sku: str = Field(min_length=1, max_length=64, pattern=r"^[A-Z0-9][A-Z0-9-]*$")
    quantity: int = Field(ge=1, le=1000)
    unit_price: Decimal = Field(gt=0, max_digits=12, decimal_places=2)


class CreateOrderRequest(BaseModel):
    """The body of ``POST /orders``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    customer_id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    currency: Literal["EUR", "GBP", "USD"]
    items: list[OrderLine] = Field(min_length=1, max_length=50)

    @property
    def total(self) -> Decimal:
        """The sum of the lines."""
        return sum((line.unit_price * line.quantity for line in self.items), Decimal(0))


@logger.inject_lambda_context
@metrics.log_metrics
@idempotent_http(
    persistence_store=idempotency_store(KEY_PREFIX),
    config=idempotency_config(expires_after_seconds=record_expiry_seconds()),
    header_name=KEY_HEADER,
    key_prefix=KEY_PREFIX,
)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Validate the order, queue its write, answer 201 with its id (or 400)."""
    try:
        request = CreateOrderRequest.model_validate_json(_body(event))
    except ValidationError as exc:
        errors = [
            {"field": ".".join(str(part) for part in error["loc"]), "message": error["msg"]}
            for error in exc.errors(include_url=False, include_input=False)
        ]
        return _problem(400, "Invalid order", "The request body is not a valid order.", errors)
    key = _header(event, KEY_HEADER)
    assert key is not None  # idempotent_http answers 400 without one (require_key=True)
    now = int(time.time())
    item: dict[str, Any] = {
        "order_id": order_id_for(key, _caller(event)),
        "customer_id": request.customer_id,
        "currency": request.currency,
        "items": [line.model_dump() for line in request.items],
        "total": request.total,
        "status": PENDING,
        "version": 1,
        "created_at": now,
        "expires_at": now + ORDER_RETENTION_SECONDS,
    }
    # Committed with the idempotency record when this handler returns a 201, in one
    # TransactWriteItems. If the order exists already (its record expired and this is a late
    # retry), the condition cancels the transaction and the client gets a 409 problem.
    current_transaction().put(env("ORDERS_TABLE"), item, condition="attribute_not_exists(order_id)")
    # Written in the same transaction; its id is stable across reruns of this request.
    outbox.emit(
        ORDER_CREATED,
        order_view(item),
        source=EVENT_SOURCE,
        event_bus_name=env("ORDER_EVENTS_BUS"),
    )
    return {
        "statusCode": 201,
        "headers": {
            "Content-Type": "application/json",
            "Location": f"/orders/{item['order_id']}",
        },
        "body": json.dumps(order_view(item)),
    }


def _body(event: Mapping[str, Any]) -> str | bytes:
    body = event.get("body") or ""
    return base64.b64decode(body) if event.get("isBase64Encoded") else str(body)


def _header(event: Mapping[str, Any], name: str) -> str | None:
    wanted = name.lower()
    for header, value in (event.get("headers") or {}).items():
        if header.lower() == wanted:
            return str(value).strip().strip('"')
    return None


def _caller(event: Mapping[str, Any]) -> str | None:
    """Return the authenticated caller (JWT ``sub``), as `idempotent_http` scopes keys by it."""
    claims = event.get("requestContext", {}).get("authorizer", {}).get("jwt", {}).get("claims", {})
    sub = claims.get("sub")
    return str(sub) if sub else None


def _problem(
    status: int, title: str, detail: str, errors: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status}
    body["detail"] = detail
    if errors is not None:
        body["errors"] = errors
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/problem+json"},
        "body": json.dumps(body),
    }
