"""Payload validation in Powertools' documented style."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

import pytest

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent
from idempotent_lambda.exceptions import IdempotencyValidationError

persistence_layer = DynamoDBPersistenceLayer(table_name="IdempotencyTable")
config = IdempotencyConfig(
    event_key_jmespath='["user_id", "product_id"]', payload_validation_jmespath="amount"
)
charges: list[int] = []


@dataclass
class Payment:
    user_id: str
    product_id: str
    charge_type: str
    amount: int
    payment_id: str = field(default_factory=lambda: f"{uuid4()}")


@idempotent(config=config, persistence_store=persistence_layer)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    payment = Payment(**event)
    charges.append(payment.amount)
    return {"payment_id": payment.payment_id, "message": "success", "statusCode": 200}


@pytest.fixture(autouse=True)
def table(make_table: Callable[..., str], point_at: Any) -> None:
    """Point the app at a fresh table."""
    point_at(persistence_layer, make_table())
    charges.clear()


def test_same_amount_replays(lambda_context: Any) -> None:
    """A retry with the same amount gets the first payment back; the charge happened once."""
    event = {"user_id": "u", "product_id": "p", "charge_type": "subscription", "amount": 500}

    first = lambda_handler(event, lambda_context)
    replay = lambda_handler({**event, "charge_type": "other"}, lambda_context)

    assert first == replay
    assert [500] == charges


def test_different_amount_is_refused(lambda_context: Any) -> None:
    """Same user and product with another amount raises `IdempotencyValidationError`."""
    event = {"user_id": "u", "product_id": "p", "charge_type": "subscription", "amount": 500}
    lambda_handler(event, lambda_context)

    with pytest.raises(IdempotencyValidationError):
        lambda_handler({**event, "amount": 10}, lambda_context)
    assert [500] == charges
