"""Powertools' documented testing patterns: a stub client, DynamoDB Local, the disable switch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest.mock import MagicMock

import pytest

from idempotent_lambda import DynamoDBPersistenceLayer, idempotent

persistence_layer = DynamoDBPersistenceLayer(table_name="IdempotencyTable")
runs: list[dict[str, Any]] = []


@idempotent(persistence_store=persistence_layer)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    runs.append(event)
    return {"payment_id": 12345, "message": "success", "statusCode": 200}


@pytest.fixture(autouse=True)
def forget_runs() -> None:
    """Start each test with no recorded runs."""
    runs.clear()


def test_with_a_stubbed_client(lambda_context: Any) -> None:
    """An assigned stub client is the one used: the request goes to it, not to the network."""
    mock_client = MagicMock()
    persistence_layer.client = mock_client

    result = handler({"testkey": "testvalue"}, lambda_context)

    mock_client.put_item.assert_called()
    assert 12345 == result["payment_id"]


def test_with_dynamodb_local(
    lambda_context: Any, dynamodb_local_client: Any, make_table: Callable[..., str]
) -> None:
    """Swapping in a client for a local DynamoDB (and another table name) works."""
    persistence_layer.client = dynamodb_local_client
    persistence_layer.table_name = make_table()

    first = handler({"testkey": "testvalue"}, lambda_context)
    second = handler({"testkey": "testvalue"}, lambda_context)

    assert 12345 == first["payment_id"] == second["payment_id"]
    assert 1 == len(runs)


@pytest.mark.parametrize("variable", ["POWERTOOLS_IDEMPOTENCY_DISABLED", "IDEMPOTENCY_DISABLED"])
def test_disabling_idempotency(
    monkeypatch: pytest.MonkeyPatch, lambda_context: Any, variable: str
) -> None:
    """With the switch on the handler just runs, every time, and the store is never called."""
    mock_client = MagicMock()
    persistence_layer.client = mock_client
    monkeypatch.setenv(variable, "1")

    assert handler({}, lambda_context)
    assert handler({}, lambda_context)
    assert 2 == len(runs)
    assert [] == mock_client.method_calls
