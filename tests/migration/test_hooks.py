"""Response hooks in Powertools' documented style."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent_function
from idempotent_lambda.hook import IdempotentHookFunction
from idempotent_lambda.persistence.datarecord import DataRecord


def my_response_hook(response: dict[str, Any], idempotent_data: DataRecord) -> dict[str, Any]:
    response["x-idempotent-key"] = idempotent_data.idempotency_key
    expiry = idempotent_data.get_expiration_datetime()
    if expiry:
        response["x-idempotent-expiration"] = expiry.isoformat()
    return response


hook: IdempotentHookFunction = my_response_hook
dynamodb = DynamoDBPersistenceLayer(table_name="IdempotencyTable")
config = IdempotencyConfig(response_hook=hook)


@idempotent_function(data_keyword_argument="order", config=config, persistence_store=dynamodb)
def process_order(order: dict[str, Any]) -> dict[str, Any]:
    order["order_id"] = str(uuid.uuid4())
    return {"order": order}


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    config.register_lambda_context(context)
    try:
        return process_order(order=event.get("order"))
    except Exception as err:
        return {"status_code": 400, "error": f"Error processing {err}"}


@pytest.fixture(autouse=True)
def table(make_table: Callable[..., str], point_at: Any) -> None:
    """Point the app at a fresh table."""
    point_at(dynamodb, make_table())


def test_hook_runs_on_replays_only(lambda_context: Any) -> None:
    """The first answer is the function's own; the replay carries the hook's headers."""
    first = lambda_handler({"order": {"item": "book"}}, lambda_context)
    replay = lambda_handler(
        {"order": {"item": "book"}}, lambda_context
    )  # a fresh event, as Lambda sends

    assert "x-idempotent-key" not in first
    assert first["order"] == replay["order"]
    assert replay["x-idempotent-key"].startswith("test-func.")  # Powertools' unnamed function
    assert "x-idempotent-expiration" in replay
