"""The longest a DynamoDB request may take, from what the installed botocore does for the client:
the window of grouped completions rests on it (DESIGN §14)."""

from __future__ import annotations

from typing import Any

import boto3.session
import pytest
from botocore.config import Config

from idempotent_lambda import DynamoDBPersistenceLayer
from idempotent_lambda.persistence._aws import DYNAMODB_DEFAULTS, build_client, request_bound_ms

#: Standard mode: each retry may wait min(2 ** n, 20) s, plus up to 5 s for x-amz-retry-after.
_STANDARD_PAUSES_MS = [1_000 + 5_000, 2_000 + 5_000, 4_000 + 5_000, 8_000 + 5_000]
#: DynamoDB's own legacy policy: 10 attempts, 0.05 * 2 ** n s before retry n + 1, no cap.
_LEGACY_PAUSES_MS = 25_550


def _client(config: Config | None = None) -> Any:
    session = boto3.session.Session(
        aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1"
    )
    return session.client("dynamodb", config=config)


@pytest.fixture(autouse=True)
def _no_retry_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for name in ("AWS_RETRY_MODE", "AWS_MAX_ATTEMPTS", "AWS_DEFAULTS_MODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))


@pytest.mark.parametrize(
    ("config", "expected_ms"),
    [
        # the store's own client: 3 attempts of 2 s connect + 3 s read, 2 standard pauses
        (Config(**DYNAMODB_DEFAULTS), 3 * 5_000 + sum(_STANDARD_PAUSES_MS[:2])),
        # botocore's defaults: standard mode gives DynamoDB 4 attempts of 60 + 60 s
        (None, 4 * 120_000 + sum(_STANDARD_PAUSES_MS[:3])),
        (
            Config(retries={"max_attempts": 4, "mode": "standard"}),
            5 * 120_000 + sum(_STANDARD_PAUSES_MS),
        ),
        (Config(connect_timeout=1, read_timeout=1, retries={"total_max_attempts": 1}), 2_000),
        # legacy mode: DynamoDB's 10 attempts, not the 5 of other services
        (Config(connect_timeout=1, read_timeout=2, retries={"mode": "legacy"}), 30_000 + 25_550),
        # legacy mode with 2 retries: 3 attempts, pauses of 0.05 and 0.1 s
        (
            Config(
                connect_timeout=1, read_timeout=1, retries={"mode": "legacy", "max_attempts": 2}
            ),
            6_150,
        ),
    ],
)
def test_every_attempt_and_backoff_counts(config: Config | None, expected_ms: int) -> None:
    """Attempts x (connect + read timeout) + the longest backoffs between them."""
    assert expected_ms == request_bound_ms(_client(config))


def test_adaptive_mode_has_no_bound() -> None:
    """Adaptive mode's rate limiter may hold a request back without limit: no bound, so no
    completion is ever written without its condition."""
    assert request_bound_ms(_client(Config(retries={"mode": "adaptive"}))) is None


@pytest.mark.parametrize(
    ("environment", "expected_ms"),
    [
        ({"AWS_RETRY_MODE": "legacy"}, 10 * 5_000 + _LEGACY_PAUSES_MS),
        ({"AWS_RETRY_MODE": "adaptive"}, None),
        ({"AWS_MAX_ATTEMPTS": "2"}, 2 * 5_000 + _STANDARD_PAUSES_MS[0]),
        ({"AWS_RETRY_MODE": "legacy", "AWS_MAX_ATTEMPTS": "2"}, 2 * 5_000 + 50),
    ],
)
def test_the_environment_counts_as_botocore_reads_it(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], expected_ms: int | None
) -> None:
    """AWS_RETRY_MODE and AWS_MAX_ATTEMPTS change what botocore does, so they change the bound."""
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert expected_ms == request_bound_ms(_client(Config(connect_timeout=2, read_timeout=3)))


def test_the_store_reads_it_from_the_client_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that builds its clients sends grouped writes through one of a single attempt
    (5 s); a client passed in is used as it is (28 s for one built like the store's), and so is
    one set later; a subclass that changes complete alone has no bound."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    own = DynamoDBPersistenceLayer("t")
    assert 5_000 == own.unconditional_write_ms()
    own.client = _client(Config(retries={"mode": "adaptive"}))
    assert own.unconditional_write_ms() is None
    client = build_client("dynamodb", None, None, DYNAMODB_DEFAULTS)
    assert 28_000 == DynamoDBPersistenceLayer("t", boto3_client=client).unconditional_write_ms()

    class Stamped(DynamoDBPersistenceLayer):
        def complete(self, record: Any) -> bool:
            return super().complete(record)

    assert Stamped("t", boto3_client=client).unconditional_write_ms() is None


def test_figures_botocore_keeps_private_fall_back_to_larger_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another botocore without the private tables read here (DynamoDB's standard attempts, the
    retry-after cap, the legacy retry data) gets a bound at least as long as any version's."""
    from botocore import loaders
    from botocore.retries import standard

    from idempotent_lambda.persistence import _aws

    clients = (
        _client(Config(connect_timeout=1, read_timeout=1)),
        _client(Config(connect_timeout=1, read_timeout=1, retries={"mode": "legacy"})),
    )
    exact = tuple(request_bound_ms(client) for client in clients)
    monkeypatch.delattr(standard, "_SERVICE_MAX_ATTEMPTS")
    monkeypatch.delattr(standard.ExponentialBackoff, "_RETRY_AFTER_MAX_ADDITIONAL")

    class NoData:
        def load_data(self, name: str) -> Any:
            raise loaders.DataNotFoundError(data_path=name)

    monkeypatch.setattr(loaders, "create_loader", NoData)
    _aws._retry_plan.cache_clear()
    try:
        fallback = tuple(request_bound_ms(client) for client in clients)
    finally:
        monkeypatch.undo()
        _aws._retry_plan.cache_clear()
    assert (4 * 2_000 + sum(_STANDARD_PAUSES_MS[:3]), 10 * 2_000 + 25_550) == exact
    assert fallback[0] >= exact[0]  # type: ignore[operator]
    assert fallback[1] >= exact[1]  # type: ignore[operator]
