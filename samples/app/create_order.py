"""CreateOrder: ``POST /orders`` behind an HTTP API, idempotent on the ``Idempotency-Key`` header.

The first request with a key creates the order and answers 201; a retry with the same key and
body gets that same 201 back with ``Idempotent-Replayed: true`` (the handler does not run); the
same key with another body is a 422, a retry while the first still runs a 409, a request without
a key a 400 — all ``application/problem+json``, answered by `idempotent_http`.

Belt and braces: the order id is derived from the key, and the order is written with a
conditional put, so even a retry that arrives after the idempotency record expired cannot
create a second order.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from idempotent_lambda import IdempotencyConfig
from idempotent_lambda.adapters.api_gateway import idempotent_http

from .aws import idempotency_store, orders_table
from .orders import ORDER_RETENTION_SECONDS, PENDING, order_id_for, order_view

KEY_HEADER = "Idempotency-Key"


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


@idempotent_http(
    persistence_store=idempotency_store(),
    config=IdempotencyConfig(expires_after_seconds=24 * 3600),
    header_name=KEY_HEADER,
    key_prefix="orders.create_order",
)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Validate the order, store it once, answer 201 with its id (or 400 / 422)."""
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
    table = orders_table()
    try:
        table.put_item(
            Item=item,
            ConditionExpression="attribute_not_exists(order_id)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    except table.meta.client.exceptions.ConditionalCheckFailedException as exc:
        # The idempotency record is gone (expired) but the order exists: answer with it.
        existing = _deserialize(cast(Mapping[str, Any], exc.response.get("Item", {})))
        if _same_order(existing, item):
            item = existing
        else:
            return _problem(
                422,
                f"{KEY_HEADER} already used",
                f"This {KEY_HEADER} created a different order.",
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


def _same_order(existing: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    fields = ("customer_id", "currency", "total")
    return all(existing.get(field) == new.get(field) for field in fields)


def _deserialize(item: Mapping[str, Any]) -> dict[str, Any]:
    from boto3.dynamodb.types import TypeDeserializer

    deserializer = TypeDeserializer()
    return {name: deserializer.deserialize(value) for name, value in item.items()}


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
