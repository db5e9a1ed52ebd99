"""The plugin's DynamoDB fixtures: a store on moto's server, a fresh table per test, boto3
pointed at the server through the environment."""

from __future__ import annotations

import os
from typing import Any

import boto3
import pytest

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent
from idempotent_lambda.testing import FakeLambdaContext, ManualClock

pytest_plugins = ["pytester"]


def test_the_store_fixture_runs_a_handler_once(
    idempotency_dynamodb_store: DynamoDBPersistenceLayer,
    idempotency_dynamodb_endpoint: str,
    lambda_context: FakeLambdaContext,
) -> None:
    """A handler on the fixture's store runs once per key and leaves one item in the table."""
    runs: list[Any] = []

    @idempotent(
        persistence_store=idempotency_dynamodb_store,
        config=IdempotencyConfig(event_key_jmespath="order_id"),
    )
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event)
        return {"order_id": event["order_id"]}

    assert handler({"order_id": "o-1"}, lambda_context) == handler(
        {"order_id": "o-1"}, lambda_context
    )
    assert 1 == len(runs)
    client = boto3.client("dynamodb", endpoint_url=idempotency_dynamodb_endpoint)
    assert 1 == client.scan(TableName=idempotency_dynamodb_store.table_name)["Count"]


def test_the_store_is_on_the_test_clock(
    idempotency_dynamodb_store: DynamoDBPersistenceLayer,
    idempotency_clock: ManualClock,
    lambda_context: FakeLambdaContext,
) -> None:
    """Moving `idempotency_clock` expires the DynamoDB store's records too."""
    runs: list[Any] = []

    @idempotent(persistence_store=idempotency_dynamodb_store)
    def handler(event: dict[str, Any], context: Any) -> int:
        runs.append(event)
        return len(runs)

    handler({"n": 1}, lambda_context)
    idempotency_clock.advance(seconds=3601)
    handler({"n": 1}, lambda_context)
    assert 2 == len(runs)


def test_the_table_fixture_points_boto3_at_the_server(
    idempotency_dynamodb_table: str, idempotency_dynamodb_endpoint: str
) -> None:
    """A client built with no options, as a module-level store builds it, finds the table."""
    assert idempotency_dynamodb_endpoint == os.environ["AWS_ENDPOINT_URL_DYNAMODB"]
    assert idempotency_dynamodb_endpoint.startswith("http://127.0.0.1:")
    assert idempotency_dynamodb_table in boto3.client("dynamodb").list_tables()["TableNames"]


def test_tables_are_fresh_per_test_and_deleted_after(pytester: pytest.Pytester) -> None:
    """Each test gets its own table, gone after the test; a pinned name is always empty."""
    pytester.makepyfile(
        """
        import boto3
        import pytest

        names = []

        def tables():
            return boto3.client("dynamodb").list_tables()["TableNames"]

        def test_first(idempotency_dynamodb_table):
            names.append(idempotency_dynamodb_table)

        def test_second(idempotency_dynamodb_table):
            assert names[0] != idempotency_dynamodb_table
            assert names[0] not in tables()
            assert idempotency_dynamodb_table in tables()

        def test_a_table_left_by_someone_else(idempotency_dynamodb_table):
            client = boto3.client("dynamodb")
            client.create_table(
                TableName="PinnedIdempotencyTable",
                BillingMode="PAY_PER_REQUEST",
                AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            )
            client.put_item(TableName="PinnedIdempotencyTable", Item={"id": {"S": "old"}})

        class TestPinned:
            @pytest.fixture
            def idempotency_table_name(self):
                return "PinnedIdempotencyTable"

            @pytest.mark.parametrize("run", [1, 2])
            def test_pinned(self, idempotency_dynamodb_table, run):
                client = boto3.client("dynamodb")
                assert "PinnedIdempotencyTable" == idempotency_dynamodb_table
                assert 0 == client.scan(TableName=idempotency_dynamodb_table)["Count"]
                client.put_item(TableName=idempotency_dynamodb_table, Item={"id": {"S": "x"}})
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=5)
