"""A misconfigured AWS client is a configuration error that names the fix, not an outage.

No region, no credentials, an endpoint URL that is not one: each raises
`IdempotencyPersistenceConfigError` (both a persistence and a configuration error), with
botocore's error as its cause, whether the client is built for DynamoDB or for S3.
"""

from __future__ import annotations

import base64
import os
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import NoCredentialsError, NoRegionError

from idempotent_lambda import idempotent
from idempotent_lambda.exceptions import (
    IdempotencyConfigError,
    IdempotencyPersistenceConfigError,
    IdempotencyPersistenceLayerError,
)
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.record import IdempotencyRecord, Status

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

KEY = "test.handler#5d41402abc4b2a76b9719d911017c592"
CREDENTIAL_SOURCES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


@pytest.fixture
def no_region(monkeypatch: pytest.MonkeyPatch) -> None:
    """Leave botocore no region anywhere (the config file is an empty temporary path)."""
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Leave botocore no credentials provider that could find any."""
    for name in CREDENTIAL_SOURCES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def config_error_of(call: Any) -> IdempotencyPersistenceConfigError:
    """Run ``call``; return the configuration error it raises."""
    with pytest.raises(IdempotencyPersistenceConfigError) as raised:
        call()
    error = raised.value
    assert (True, True) == (
        isinstance(error, IdempotencyPersistenceLayerError),
        isinstance(error, IdempotencyConfigError),
    )
    return error


@pytest.mark.usefixtures("no_region")
def test_no_region_names_where_to_set_one() -> None:
    """No region: the message says to set AWS_DEFAULT_REGION or a Config's region_name."""
    error = config_error_of(lambda: DynamoDBPersistenceLayer("any-table").get(KEY))
    assert isinstance(error.__cause__, NoRegionError)
    assert (True, True) == ("AWS_DEFAULT_REGION" in str(error), "region_name=" in str(error))


@pytest.mark.usefixtures("no_credentials")
def test_no_credentials_names_where_they_come_from(
    monkeypatch: pytest.MonkeyPatch, dynamodb_endpoint: str
) -> None:
    """No credentials: the message names the execution role and the environment variables."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_endpoint)
    error = config_error_of(lambda: DynamoDBPersistenceLayer("any-table").get(KEY))
    assert isinstance(error.__cause__, NoCredentialsError)
    assert (True, True) == ("execution role" in str(error), "AWS_ACCESS_KEY_ID" in str(error))


@pytest.mark.parametrize(
    ("variable", "value", "fix"),
    [
        pytest.param("AWS_DEFAULT_REGION", "us east 1", "region_name=", id="invalid-region"),
        pytest.param("AWS_PROFILE", "no-such-profile", "AWS_PROFILE", id="missing-profile"),
        pytest.param("AWS_SECRET_ACCESS_KEY", "", "AWS_SECRET_ACCESS_KEY", id="partial-keys"),
    ],
)
def test_other_misconfigurations_name_their_fix(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, fix: str
) -> None:
    """An invalid region, a profile that does not exist, half a key pair: each names its fix."""
    if value:
        monkeypatch.setenv(variable, value)
    else:
        monkeypatch.delenv(variable)
    error = config_error_of(lambda: DynamoDBPersistenceLayer("any-table").get(KEY))
    assert fix in str(error)


@pytest.mark.parametrize("url", ["not a url", "127.0.0.1:8000"])
def test_an_invalid_endpoint_url_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    """An endpoint URL botocore refuses is a configuration error naming the variable, not a
    raw ValueError; the client is built on first use, so that is where it is raised."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", url)
    store = DynamoDBPersistenceLayer("any-table")
    for call in (lambda: store.get(KEY), lambda: store.client):
        error = config_error_of(call)
        assert isinstance(error.__cause__, ValueError)
        assert "AWS_ENDPOINT_URL_DYNAMODB" in str(error)


def test_an_invalid_s3_endpoint_is_a_configuration_error_too(
    monkeypatch: pytest.MonkeyPatch, dynamodb_client: DynamoDBClient, idempotency_table: str
) -> None:
    """The large-result client is built the same way: its endpoint variable is named."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "not a url")
    store = DynamoDBPersistenceLayer(
        idempotency_table, boto3_client=dynamodb_client, large_result_bucket="results"
    )
    claimed = IdempotencyRecord(KEY, Status.IN_PROGRESS, 4_000_000_000, owner="owner-a")
    store.claim(claimed, now_ms=0, lease_cutoff_ms=0)
    large = base64.b64encode(os.urandom(450_000)).decode()
    done = IdempotencyRecord(KEY, Status.COMPLETED, 4_000_000_000, None, large, owner="owner-a")

    error = config_error_of(lambda: store.complete(done))
    assert "AWS_ENDPOINT_URL_S3" in str(error)


@pytest.mark.usefixtures("no_region")
def test_a_decorated_handler_raises_the_configuration_error_before_running() -> None:
    """Through the engine the error arrives unchanged, and the body does not run."""
    runs: list[int] = []

    @idempotent(persistence_store=DynamoDBPersistenceLayer("any-table"))
    def handler(event: dict[str, Any], context: Any) -> None:
        runs.append(1)

    config_error_of(lambda: handler({"n": 1}, None))
    assert [] == runs


@pytest.mark.usefixtures("no_region")
def test_an_http_handler_answers_500_when_boto3_has_no_region() -> None:
    """Issue 20 item 16, end to end: real boto3 with no region is a 500 problem, no retry hint."""
    from idempotent_lambda.adapters.api_gateway import idempotent_http
    from idempotent_lambda.testing import api_gateway_http_event

    runs: list[int] = []

    @idempotent_http(persistence_store=DynamoDBPersistenceLayer("any-table"))
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(1)
        return {"statusCode": 201, "body": "{}"}

    answer = handler(api_gateway_http_event(), None)
    headers = {name.lower() for name in answer.get("headers", {})}
    assert (500, False, []) == (answer["statusCode"], "retry-after" in headers, runs)
