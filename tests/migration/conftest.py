"""Fixtures for the migration tests: Powertools-style code against a local DynamoDB.

The tests follow Powertools' documented testing pattern: the app module builds its
``DynamoDBPersistenceLayer`` at import time, and the test points it at a local DynamoDB by
assigning ``persistence_layer.client`` (moto's server on 127.0.0.1 here, DynamoDB Local in their
docs). Each test gets a fresh table.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from idempotent_lambda.persistence.dynamodb._operator import create_idempotency_table

TableFactory = Callable[..., str]
_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests here ``integration``: most talk to moto's server on 127.0.0.1."""
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Idempotency on, no function name, dummy AWS credentials: nothing reaches a real account."""
    for name in (
        "IDEMPOTENCY_DISABLED",
        "POWERTOOLS_IDEMPOTENCY_DISABLED",
        "AWS_LAMBDA_FUNCTION_NAME",
        "AWS_PROFILE",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_DYNAMODB",
    ):
        monkeypatch.delenv(name, raising=False)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))


@pytest.fixture(scope="session")
def dynamodb_endpoint() -> Iterator[str]:
    """Yield the URL of moto's DynamoDB-compatible server, started once for the session."""
    from idempotent_lambda.testing import local_dynamodb

    with local_dynamodb() as endpoint:
        yield endpoint


@pytest.fixture
def dynamodb_local_client(dynamodb_endpoint: str, environment: None) -> Any:
    """Return a ``dynamodb`` client at the local server (what the docs call DynamoDB Local)."""
    return boto3.client("dynamodb", endpoint_url=dynamodb_endpoint, region_name="us-east-1")


@pytest.fixture
def make_table(dynamodb_local_client: Any) -> Iterator[TableFactory]:
    """Yield a factory of fresh idempotency tables (options as `create_idempotency_table`)."""
    created: list[str] = []

    def make(**options: Any) -> str:
        name = f"IdempotencyTable-{uuid.uuid4().hex[:10]}"
        create_idempotency_table(dynamodb_local_client, table_name=name, **options)
        created.append(name)
        return name

    yield make
    for name in created:
        with contextlib.suppress(Exception):
            dynamodb_local_client.delete_table(TableName=name)


@pytest.fixture
def lambda_context() -> Any:
    """Return a Lambda context like the one in Powertools' testing docs."""

    @dataclass
    class LambdaContext:
        function_name: str = "test"
        memory_limit_in_mb: int = 128
        invoked_function_arn: str = "arn:aws:lambda:eu-west-1:123456789012:function:test"
        aws_request_id: str = "da658bd3-2d6f-4e7b-8ec2-937234644fdc"

        def get_remaining_time_in_millis(self) -> int:
            return 120_000

    return LambdaContext()


@pytest.fixture
def point_at(dynamodb_local_client: Any) -> Callable[[Any, str], None]:
    """Return ``point_at(layer, table)``: the docs' pattern of swapping the client and table."""

    def point(layer: Any, table_name: str) -> None:
        layer.client = dynamodb_local_client
        layer.table_name = table_name

    return point
