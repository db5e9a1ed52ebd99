"""DynamoDB basics in Powertools' documented style: handler, payload subset, attribute names,
composite key, local cache, required key, custom prefix, expiry."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

import pytest

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent
from idempotent_lambda.exceptions import IdempotencyKeyError

# --- the app, as a Powertools user writes it (only the import prefix differs) ---------------

persistence_layer = DynamoDBPersistenceLayer(table_name=os.getenv("IDEMPOTENCY_TABLE", "table"))
custom_attributes_layer = DynamoDBPersistenceLayer(
    table_name="IdempotencyTable",
    key_attr="idempotency_key",
    expiry_attr="expires_at",
    in_progress_expiry_attr="in_progress_expires_at",
    status_attr="current_status",
    data_attr="result_data",
    validation_key_attr="validation_key",
)
composite_layer = DynamoDBPersistenceLayer(table_name="IdempotencyTable", sort_key_attr="sort_key")
subset_config = IdempotencyConfig(
    event_key_jmespath='powertools_json(body).["user_id", "product_id"]'
)
cached_config = IdempotencyConfig(event_key_jmespath="body", use_local_cache=True)
required_config = IdempotencyConfig(
    event_key_jmespath='["user.uid", "order_id"]', raise_on_no_idempotency_key=True
)
day_config = IdempotencyConfig(event_key_jmespath="body", expires_after_seconds=24 * 60 * 60)
calls: list[str] = []


@dataclass
class Payment:
    user_id: str
    product_id: str
    payment_id: str = field(default_factory=lambda: f"{uuid4()}")


class PaymentError(Exception): ...


def create_subscription_payment(event: dict[str, Any]) -> Payment:
    calls.append("payment")
    return Payment(**event)


@idempotent(persistence_store=persistence_layer)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    try:
        payment = create_subscription_payment(event)
        return {"payment_id": payment.payment_id, "message": "success", "statusCode": 200}
    except Exception as exc:
        raise PaymentError(f"Error creating payment {exc}") from exc


@idempotent(config=subset_config, persistence_store=persistence_layer)
def subset_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    payment = create_subscription_payment(json.loads(event.get("body", "")))
    return {"payment_id": payment.payment_id, "message": "success", "statusCode": 200}


@idempotent(persistence_store=custom_attributes_layer)
def custom_attributes_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    calls.append("custom")
    return event


@idempotent(persistence_store=composite_layer)
def composite_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    calls.append("composite")
    return {"message": "success", "user_id": event["body"]["user_id"]}


@idempotent(config=cached_config, persistence_store=persistence_layer)
def cached_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    calls.append("cached")
    return event


@idempotent(config=required_config, persistence_store=persistence_layer)
def required_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return event


@idempotent(persistence_store=persistence_layer, key_prefix="my_custom_prefix")
def prefixed_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"ok": True}


@idempotent(config=day_config, persistence_store=persistence_layer)
def day_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return event


# --- the tests ------------------------------------------------------------------------------


@pytest.fixture
def table(make_table: Callable[..., str], point_at: Any) -> str:
    """Point the app's default layer at a fresh table; forget earlier calls."""
    name = make_table()
    point_at(persistence_layer, name)
    calls.clear()
    return name


def _items(client: Any, table_name: str) -> list[dict[str, Any]]:
    return list(client.scan(TableName=table_name, ConsistentRead=True)["Items"])


def test_getting_started_runs_once(
    table: str, lambda_context: Any, dynamodb_local_client: Any
) -> None:
    """The second call with the same event returns the first payment, without paying again."""
    event = {"user_id": "u-1", "product_id": "p-1"}

    first = lambda_handler(event, lambda_context)
    second = lambda_handler(event, lambda_context)

    assert first == second
    assert ["payment"] == calls
    (item,) = _items(dynamodb_local_client, table)
    assert "COMPLETED" == item["status"]["S"]


def test_handler_error_is_raised_and_not_stored(
    table: str, lambda_context: Any, dynamodb_local_client: Any
) -> None:
    """A failing payment raises the handler's own error and leaves no record."""
    with pytest.raises(PaymentError):
        lambda_handler({"user_id": "u-1"}, lambda_context)

    assert [] == _items(dynamodb_local_client, table)


def test_payload_subset_ignores_other_fields(table: str, lambda_context: Any) -> None:
    """The key covers user and product only: another request id is the same request."""
    body = {"user_id": "u-1", "product_id": "p-1"}

    first = subset_handler({"body": json.dumps(body), "requestId": "a"}, lambda_context)
    second = subset_handler({"body": json.dumps(body), "requestId": "b"}, lambda_context)

    assert first == second
    assert ["payment"] == calls


def test_custom_attribute_names(
    make_table: Callable[..., str], point_at: Any, dynamodb_local_client: Any, lambda_context: Any
) -> None:
    """Every attribute-name option is honoured in the stored item."""
    name = make_table(key_attr="idempotency_key", expiry_attr="expires_at")
    point_at(custom_attributes_layer, name)
    calls.clear()

    assert {"a": 1} == custom_attributes_handler({"a": 1}, lambda_context)
    assert {"a": 1} == custom_attributes_handler({"a": 1}, lambda_context)

    (item,) = _items(dynamodb_local_client, name)
    assert {"idempotency_key", "expires_at", "current_status", "result_data"} <= set(item)
    assert ["custom"] == calls


def test_composite_key(
    make_table: Callable[..., str], point_at: Any, dynamodb_local_client: Any, lambda_context: Any
) -> None:
    """With a sort key the partition holds the static value and the sort key the hash."""
    name = make_table(sort_key_attr="sort_key")
    point_at(composite_layer, name)
    calls.clear()
    event = {"body": {"user_id": "u-9"}}

    assert composite_handler(event, lambda_context) == composite_handler(event, lambda_context)
    (item,) = _items(dynamodb_local_client, name)
    assert item["id"]["S"].startswith("idempotency#")
    assert "#" in item["sort_key"]["S"]
    assert ["composite"] == calls


def test_local_cache_answers_without_the_table(
    table: str, lambda_context: Any, dynamodb_local_client: Any
) -> None:
    """After the first call the cache answers, even once the table's item is gone."""
    event = {"body": "order-1"}
    cached_handler(event, lambda_context)
    (item,) = _items(dynamodb_local_client, table)
    dynamodb_local_client.delete_item(TableName=table, Key={"id": item["id"]})

    assert event == cached_handler(event, lambda_context)
    assert ["cached"] == calls


def test_required_key(table: str, lambda_context: Any) -> None:
    """Without ``user.uid`` and ``order_id`` the handler raises `IdempotencyKeyError`."""
    with pytest.raises(IdempotencyKeyError):
        required_handler({"user": {"uid": "u"}}, lambda_context)
    event = {"user.uid": "u-1", "order_id": 7}

    assert event == required_handler(event, lambda_context)


def test_custom_key_prefix(table: str, lambda_context: Any, dynamodb_local_client: Any) -> None:
    """``key_prefix`` replaces the function-derived prefix in the stored key."""
    prefixed_handler({"a": 1}, lambda_context)

    (item,) = _items(dynamodb_local_client, table)
    assert item["id"]["S"].startswith("my_custom_prefix#")


def test_record_expiration(table: str, lambda_context: Any, dynamodb_local_client: Any) -> None:
    """``expires_after_seconds`` sets the item's TTL attribute that far ahead."""
    import time

    before = int(time.time())
    day_handler({"body": "x"}, lambda_context)

    (item,) = _items(dynamodb_local_client, table)
    expiration = int(item["expiration"]["N"])
    assert before + 86_400 <= expiration <= int(time.time()) + 86_400
