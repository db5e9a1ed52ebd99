"""Lambda timeouts in Powertools' documented style: ``register_lambda_context`` sets the lease."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent_function

persistence_layer = DynamoDBPersistenceLayer(table_name="IdempotencyTable")
config = IdempotencyConfig()
leases: list[int] = []


@idempotent_function(
    data_keyword_argument="record", persistence_store=persistence_layer, config=config
)
def record_handler(record: dict[str, Any]) -> dict[str, Any]:
    item = persistence_layer.client.scan(TableName=persistence_layer.table_name)["Items"][0]
    leases.append(int(item["in_progress_expiration"]["N"]))
    return {"message": record["body"]}


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    config.register_lambda_context(context)
    return record_handler(record=event)


@pytest.fixture(autouse=True)
def table(make_table: Callable[..., str], point_at: Any) -> None:
    """Point the app at a fresh table."""
    point_at(persistence_layer, make_table())
    leases.clear()


def test_lease_is_the_remaining_time(lambda_context: Any) -> None:
    """The in-progress lease ends when the invocation would time out (120 s from now)."""
    before = time.time_ns() // 1_000_000
    first = lambda_handler({"body": "hello"}, lambda_context)
    after = time.time_ns() // 1_000_000

    assert {"message": "hello"} == first == lambda_handler({"body": "hello"}, lambda_context)
    (lease,) = leases
    assert before + 120_000 - 1_000 <= lease <= after + 120_000


def test_positional_payload_works_too(lambda_context: Any) -> None:
    """Powertools needs the payload by keyword; here a positional call works as well."""
    config.register_lambda_context(lambda_context)

    assert {"message": "x"} == record_handler({"body": "x"})
    assert {"message": "x"} == record_handler(record={"body": "x"})
    assert 1 == len(leases)
