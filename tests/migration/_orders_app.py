"""An order service written with Powertools' idempotency utility, as its users write it.

tests/migration/test_literal_swap.py runs it as it is, and as its text with the import prefix
replaced; nothing else in it changes. Side effects go to the shared `LEDGER`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyValidationError,
)
from aws_lambda_powertools.utilities.idempotency.serialization.dataclass import (
    DataclassSerializer,
)

from tests.migration._ledger import LEDGER

__all__ = ["IdempotencyAlreadyInProgressError", "IdempotencyValidationError"]

TABLE = os.environ.get("IDEMPOTENCY_TABLE", "IdempotencyTable")
orders_layer = DynamoDBPersistenceLayer(table_name=TABLE)
payments_layer = DynamoDBPersistenceLayer(table_name=TABLE)  # one per decorator, as advised
order_config = IdempotencyConfig(
    event_key_jmespath="order_id", payload_validation_jmespath="amount"
)
payment_config = IdempotencyConfig(event_key_jmespath="payment_id")


@dataclass
class Payment:
    payment_id: str
    amount: int
    confirmation: str = field(default_factory=lambda: uuid4().hex)


@idempotent_function(
    data_keyword_argument="payment",
    persistence_store=payments_layer,
    config=payment_config,
    output_serializer=DataclassSerializer(model=Payment),
)
def charge(payment: dict[str, Any]) -> Payment:
    LEDGER.append(("charge", payment["payment_id"]))
    return Payment(payment["payment_id"], payment["amount"])


@idempotent(persistence_store=orders_layer, config=order_config)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    payment_config.register_lambda_context(context)
    payment = charge(payment={"payment_id": f"pay-{event['order_id']}", "amount": event["amount"]})
    LEDGER.append(("order", event["order_id"]))
    return {
        "order_id": event["order_id"],
        "amount": event["amount"],
        "confirmation": payment.confirmation,
    }
