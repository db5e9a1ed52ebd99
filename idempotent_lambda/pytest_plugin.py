"""pytest fixtures for testing idempotent handlers; registered through the `pytest11` entry point.

Fixtures:
    idempotency_clock: A `ManualClock` shared by the store and the context.
    idempotency_store: An `InMemoryPersistenceLayer` on that clock, fresh per test.
    lambda_context: A `FakeLambdaContext` with 30 s remaining on that clock.
    idempotency_dynamodb_store: A `DynamoDBPersistenceLayer` on that clock, on a fresh table of
        moto's DynamoDB-compatible server (needs the `testing` extra).
    idempotency_dynamodb_table: That fresh table's name, with boto3 pointed at the server
        through the environment (every service: the table's stream, S3, EventBridge, SQS),
        for handlers that build their own store.
    idempotency_table_name: The name the table gets: unique per test; override the fixture
        to pin it.
    idempotency_dynamodb_endpoint: The server's URL; started on 127.0.0.1 once per session.
    import_handler: `import_handler("module")` imports a handler module afresh, as a new Lambda
        instance does, so its store is built from this test's environment; the module is
        forgotten again when the test ends.

The store and context fixtures forget any context the test registered with
`config.register_lambda_context` when the test ends: other threads can still find a
registration, and a context on a `ManualClock` never runs out of time, so it would leak into
the next test.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from idempotent_lambda._lambda_context import reset
from idempotent_lambda.persistence.in_memory import InMemoryPersistenceLayer
from idempotent_lambda.testing import (
    FakeLambdaContext,
    ManualClock,
    create_idempotency_table,
    local_dynamodb,
)

if TYPE_CHECKING:
    from idempotent_lambda import DynamoDBPersistenceLayer

#: What a test's AWS clients see: the local server, dummy credentials, a region.
_LOCAL_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}
#: What would send those clients elsewhere: a profile's credentials, or ignoring the endpoint.
_AWAY = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
)
#: The services a test of idempotent code and its outbox talks to, each named by its own
#: variable too (botocore's names: the service id, upper case, spaces as underscores).
_LOCAL_SERVICES = ("DYNAMODB", "DYNAMODB_STREAMS", "S3", "EVENTBRIDGE", "SQS")


@pytest.fixture
def idempotency_clock() -> ManualClock:
    """Return a clock that moves only when the test says so."""
    return ManualClock()


@pytest.fixture
def idempotency_store(idempotency_clock: ManualClock) -> Iterator[InMemoryPersistenceLayer]:
    """Return an empty in-memory store on the test's clock."""
    yield InMemoryPersistenceLayer(clock=idempotency_clock)
    reset()


@pytest.fixture
def lambda_context(idempotency_clock: ManualClock) -> Iterator[FakeLambdaContext]:
    """Return a Lambda context with 30 seconds remaining on the test's clock."""
    yield FakeLambdaContext(30_000, clock=idempotency_clock)
    reset()


@pytest.fixture(scope="session")
def idempotency_dynamodb_endpoint() -> Iterator[str]:
    """Start moto's DynamoDB-compatible server on 127.0.0.1 for the session; yield its URL."""
    with local_dynamodb() as endpoint:
        yield endpoint


@pytest.fixture
def idempotency_table_name() -> str:
    """Return the name of the test's idempotency table: a unique one.

    Override this fixture when the code under test names its table itself.
    """
    return f"idempotency-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def idempotency_dynamodb_table(
    idempotency_dynamodb_endpoint: str,
    idempotency_table_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[str]:
    """Create a fresh, empty idempotency table on the local server and yield its name.

    For the test, boto3 clients of any service built anywhere reach that server, which serves
    every service moto emulates on one port (DynamoDB and its Streams, S3, EventBridge, SQS,
    ...): `AWS_ENDPOINT_URL` is set to it, and so are `AWS_ENDPOINT_URL_DYNAMODB`,
    `_DYNAMODB_STREAMS`, `_S3`, `_EVENTBRIDGE` and `_SQS`; any other `AWS_ENDPOINT_URL_*` of
    the shell is unset, so no service is sent elsewhere. Credentials and a region are dummies,
    the profile variables are unset. The table is deleted when the test ends.
    """
    import boto3

    for name in [name for name in os.environ if name.startswith("AWS_ENDPOINT_URL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ENDPOINT_URL", idempotency_dynamodb_endpoint)
    for service in _LOCAL_SERVICES:
        monkeypatch.setenv(f"AWS_ENDPOINT_URL_{service}", idempotency_dynamodb_endpoint)
    for name, value in _LOCAL_AWS.items():
        monkeypatch.setenv(name, value)
    for name in _AWAY:
        monkeypatch.delenv(name, raising=False)
    client: Any = boto3.client(
        "dynamodb",
        endpoint_url=idempotency_dynamodb_endpoint,
        region_name=_LOCAL_AWS["AWS_REGION"],
        aws_access_key_id=_LOCAL_AWS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=_LOCAL_AWS["AWS_SECRET_ACCESS_KEY"],
    )
    _drop(client, idempotency_table_name)  # a pinned name may be taken: start empty anyway
    create_idempotency_table(client, table_name=idempotency_table_name)
    yield idempotency_table_name
    _drop(client, idempotency_table_name)


@pytest.fixture
def idempotency_dynamodb_store(
    idempotency_dynamodb_table: str, idempotency_clock: ManualClock
) -> Iterator[DynamoDBPersistenceLayer]:
    """Return a `DynamoDBPersistenceLayer` on the test's fresh table and clock.

    Its client is built on first use from the environment `idempotency_dynamodb_table` set, as
    in Lambda.
    """
    from idempotent_lambda import DynamoDBPersistenceLayer

    yield DynamoDBPersistenceLayer(idempotency_dynamodb_table, clock=idempotency_clock)
    reset()


@pytest.fixture
def import_handler() -> Iterator[Callable[[str], ModuleType]]:
    """Return a function that imports a module afresh, as a cold start does.

    Use it after setting the environment the module reads at import (its table name, the
    fixtures' endpoint): the store it builds at import is then this test's. When the test
    ends, `sys.modules` holds again what it held before.
    """
    saved: dict[str, ModuleType | None] = {}

    def fresh(name: str) -> ModuleType:
        saved.setdefault(name, sys.modules.pop(name, None))
        sys.modules.pop(name, None)
        return importlib.import_module(name)

    yield fresh
    for name, module in saved.items():
        if module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = module


def _drop(client: Any, table_name: str) -> None:
    """Delete the table if it exists."""
    with contextlib.suppress(client.exceptions.ResourceNotFoundException):
        client.delete_table(TableName=table_name)
