"""The longest a DynamoDB request may take, read from the client: the window of batched
completions depends on it (DESIGN §13)."""

from __future__ import annotations

from typing import Any

import boto3.session
import pytest
from botocore.config import Config

from idempotent_lambda import DynamoDBPersistenceLayer
from idempotent_lambda.persistence._aws import DYNAMODB_DEFAULTS, build_client, request_bound_ms


def _client(config: Config | None = None) -> Any:
    session = boto3.session.Session(
        aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1"
    )
    return session.client("dynamodb", config=config)


@pytest.mark.parametrize(
    ("config", "expected_ms"),
    [
        # 3 attempts of 2 s connect + 3 s read, backoffs of at most 1 and 2 s
        (Config(**DYNAMODB_DEFAULTS), 3 * 5_000 + 3_000),
        # standard mode, 4 attempts of 60 + 60 s, backoffs of at most 1, 2 and 4 s
        (Config(retries={"max_attempts": 3, "mode": "standard"}), 4 * 120_000 + 7_000),
        (Config(connect_timeout=1, read_timeout=1, retries={"total_max_attempts": 1}), 2_000),
        # legacy mode, 5 attempts: backoffs of at most 1, 2, 4 and 8 s
        (Config(connect_timeout=1, read_timeout=2, retries={"mode": "legacy"}), 5 * 3_000 + 15_000),
    ],
)
def test_every_attempt_and_backoff_counts(config: Config, expected_ms: int) -> None:
    """Attempts x (connect + read timeout) + the longest backoffs between them."""
    assert expected_ms == request_bound_ms(_client(config))


def test_the_store_reads_it_from_its_own_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default client's bound is 18 s; a subclass that changes complete alone has none."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    client = build_client("dynamodb", None, None, DYNAMODB_DEFAULTS)
    assert 18_000 == DynamoDBPersistenceLayer("t", boto3_client=client).unconditional_write_ms()

    class Stamped(DynamoDBPersistenceLayer):
        def complete(self, record: Any) -> bool:
            return super().complete(record)

    assert Stamped("t", boto3_client=client).unconditional_write_ms() is None
