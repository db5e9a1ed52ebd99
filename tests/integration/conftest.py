"""Fixtures for tests against a DynamoDB-compatible server on loopback.

By default a moto server is started once per session on 127.0.0.1 with a free port. Set
``IDEMPOTENT_LAMBDA_TEST_ENDPOINT`` (e.g. ``http://127.0.0.1:8000`` for DynamoDB Local) to use
that server instead. Every test here gets dummy AWS credentials and region through monkeypatched
environment variables, so nothing leaks into other tests and no real account is ever reached.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.persistence.dynamodb._operator import create_idempotency_table
from tests.integration._crafted_aws import crafted_aws  # noqa: F401 - fixture
from tests.integration._dynalite import (  # noqa: F401 - fixtures
    dynalite_client,
    dynalite_endpoint,
    make_dynalite_table,
)
from tests.integration._outbox_stack import stack  # noqa: F401 - fixture
from tests.integration._redis_server import (  # noqa: F401 - fixtures
    redis_client,
    redis_cluster_port,
    redis_port,
    redis_store,
    redis_tls,
    redis_tls_cluster,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

ENDPOINT_ENV = "IDEMPOTENT_LAMBDA_TEST_ENDPOINT"
_HERE = Path(__file__).parent

TableFactory = Callable[..., str]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under tests/integration as ``integration``."""
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def dynamodb_endpoint() -> Iterator[str]:
    """Yield the endpoint URL of the DynamoDB-compatible server (moto unless overridden)."""
    external = os.environ.get(ENDPOINT_ENV)
    if external:
        yield external
        return
    from idempotent_lambda.testing import local_dynamodb

    with local_dynamodb() as endpoint:
        yield endpoint


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Give each test dummy credentials and a region, isolated from the developer's AWS setup."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SECURITY_TOKEN", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_DYNAMODB", raising=False)


@pytest.fixture(scope="session")
def _boto3_session() -> boto3.session.Session:
    """Return one boto3 session for the test clients, so service models load only once."""
    return boto3.session.Session()


@pytest.fixture
def dynamodb_client(
    _boto3_session: boto3.session.Session, dynamodb_endpoint: str, aws_environment: None
) -> DynamoDBClient:
    """Return a fresh ``dynamodb`` client pointed at the test server, with dummy credentials."""
    return _boto3_session.client(
        "dynamodb",
        endpoint_url=dynamodb_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@pytest.fixture
def make_table(dynamodb_client: DynamoDBClient) -> Iterator[TableFactory]:
    """Yield a factory of fresh, uniquely named idempotency tables; all are deleted afterwards.

    Keyword arguments go to `create_idempotency_table` (``key_attr``, ``sort_key_attr``, ...).
    """
    created: list[str] = []

    def make(**options: Any) -> str:
        name = f"idempotency-{uuid.uuid4().hex[:12]}"
        create_idempotency_table(dynamodb_client, table_name=name, **options)
        created.append(name)
        return name

    yield make
    for name in created:
        with contextlib.suppress(dynamodb_client.exceptions.ResourceNotFoundException):
            dynamodb_client.delete_table(TableName=name)


@pytest.fixture
def idempotency_table(make_table: TableFactory) -> str:
    """Return the name of a fresh idempotency table (key ``id``), deleted after the test."""
    return make_table()


@pytest.fixture
def dynamodb_store(
    idempotency_table: str, dynamodb_client: DynamoDBClient
) -> DynamoDBPersistenceLayer:
    """Return a `DynamoDBPersistenceLayer` on ``idempotency_table`` at the test server."""
    return DynamoDBPersistenceLayer(idempotency_table, boto3_client=dynamodb_client)


@pytest.fixture
def s3_client(
    _boto3_session: boto3.session.Session, dynamodb_endpoint: str, aws_environment: None
) -> Any:
    """Return an ``s3`` client on the test server (moto serves S3 there too), path-style."""
    from botocore.config import Config

    return _boto3_session.client(
        "s3",
        endpoint_url=dynamodb_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(s3={"addressing_style": "path"}),
    )


@pytest.fixture
def bucket(s3_client: Any) -> Iterator[str]:
    """Yield a fresh bucket; emptied and deleted afterwards."""
    name = f"results-{uuid.uuid4().hex[:12]}"
    s3_client.create_bucket(Bucket=name)
    yield name
    for item in s3_client.list_objects_v2(Bucket=name).get("Contents", []):
        s3_client.delete_object(Bucket=name, Key=item["Key"])
    with contextlib.suppress(Exception):
        s3_client.delete_bucket(Bucket=name)


@pytest.fixture
def requests(dynamodb_client: Any) -> Iterator[Counter[str]]:
    """Count the DynamoDB requests the client makes, by operation (a botocore event hook)."""
    counts: Counter[str] = Counter()
    lock = threading.Lock()

    def count(model: Any, **_: Any) -> None:
        with lock:
            counts[model.name] += 1

    dynamodb_client.meta.events.register("before-call.dynamodb", count)
    yield counts
    dynamodb_client.meta.events.unregister("before-call.dynamodb", count)
