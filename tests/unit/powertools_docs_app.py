"""A Lambda module written as Powertools' idempotency documentation shows it.

The only change from the documentation is the import block. Powertools' original is::

    from aws_lambda_powertools.utilities.idempotency import (
        DynamoDBPersistenceLayer,
        IdempotencyConfig,
        idempotent,
        idempotent_function,
    )
    from aws_lambda_powertools.utilities.idempotency.serialization.dataclass import (
        DataclassSerializer,
    )
    from aws_lambda_powertools.utilities.idempotency.serialization.pydantic import (
        PydanticSerializer,
    )

`tests/unit/test_powertools_compat.py` imports this module (against an in-process moto DynamoDB)
and runs every handler in it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

from pydantic import BaseModel

from idempotent_lambda import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
    idempotent_function,
)
from idempotent_lambda.serialization import DataclassSerializer, PydanticSerializer

table = os.getenv("IDEMPOTENCY_TABLE", "IdempotencyTable")
persistence_layer = DynamoDBPersistenceLayer(table_name=table)
dynamodb = persistence_layer

# --- Getting started ------------------------------------------------------------------------


@dataclass
class Payment:
    user_id: str
    product_id: str
    payment_id: str = field(default_factory=lambda: f"{uuid4()}")


class PaymentError(Exception): ...


@idempotent(persistence_store=persistence_layer)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    try:
        payment: Payment = create_subscription_payment(event)
        return {
            "payment_id": payment.payment_id,
            "message": "success",
            "statusCode": 200,
        }
    except Exception as exc:
        raise PaymentError(f"Error creating payment {exc!s}") from exc


def create_subscription_payment(event: dict[str, Any]) -> Payment:
    return Payment(**event)


# --- Choosing a payload subset, with payload validation, local cache and expiry --------------

subset_config = IdempotencyConfig(
    event_key_jmespath='["user_id", "product_id"]',
    payload_validation_jmespath="amount",
    expires_after_seconds=5 * 60,
    use_local_cache=True,
)


@idempotent(config=subset_config, persistence_store=persistence_layer)
def subset_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"payment_id": f"{uuid4()}", "amount": event["amount"]}


# --- Making idempotency key required --------------------------------------------------------

required_config = IdempotencyConfig(
    event_key_jmespath='["user.uid", "order_id"]',
    raise_on_no_idempotency_key=True,
)


@idempotent(config=required_config, persistence_store=persistence_layer)
def required_key_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"message": "success", "statusCode": 200}


# --- idempotent_function with a dataclass payload and register_lambda_context ---------------

config = IdempotencyConfig(event_key_jmespath="order_id")


@dataclass
class OrderItem:
    sku: str
    description: str


@dataclass
class Order:
    item: OrderItem
    order_id: int


@idempotent_function(data_keyword_argument="order", config=config, persistence_store=dynamodb)
def process_order(order: Order) -> str:
    return f"processed order {order.order_id} {uuid4()}"


def order_handler(event: dict[str, Any], context: Any) -> str:
    config.register_lambda_context(context)  # see Lambda timeouts section
    order_item = OrderItem(sku="fake", description="sample")
    order = Order(item=order_item, order_id=event["order_id"])

    # `order` parameter must be called as a keyword argument to work
    return process_order(order=order)


# --- Output serialization -------------------------------------------------------------------


class PydanticOrderItem(BaseModel):
    sku: str
    description: str


class PydanticOrder(BaseModel):
    item: PydanticOrderItem
    order_id: int


class OrderOutput(BaseModel):
    order_id: int
    reference: str


@dataclass
class DataclassOrderOutput:
    order_id: int
    reference: str


@idempotent_function(
    data_keyword_argument="order",
    config=config,
    persistence_store=dynamodb,
    output_serializer=PydanticSerializer,
)
def process_order_annotated(order: PydanticOrder) -> OrderOutput:
    return OrderOutput(order_id=order.order_id, reference=f"{uuid4()}")


@idempotent_function(
    data_keyword_argument="order",
    config=config,
    persistence_store=dynamodb,
    output_serializer=PydanticSerializer(model=OrderOutput),
)
def process_order_explicit(order: PydanticOrder):  # type: ignore[no-untyped-def]
    return OrderOutput(order_id=order.order_id, reference=f"{uuid4()}")


@idempotent_function(
    data_keyword_argument="order",
    config=config,
    persistence_store=dynamodb,
    output_serializer=DataclassSerializer(model=DataclassOrderOutput),
)
def process_order_dataclass(order: Order):  # type: ignore[no-untyped-def]
    return DataclassOrderOutput(order_id=order.order_id, reference=f"{uuid4()}")
