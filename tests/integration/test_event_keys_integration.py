"""The key presets on a real DynamoDB-compatible server: a resend replays, a new event runs."""

from __future__ import annotations

from typing import Any

import pytest

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent
from idempotent_lambda.testing import FakeLambdaContext
from tests.unit.test_event_keys import CASES, with_change


@pytest.mark.parametrize(("expression", "event", "retried", "distinct"), CASES)
def test_preset_replays_a_redelivery_and_runs_another_event(
    dynamodb_store: DynamoDBPersistenceLayer,
    expression: str,
    event: dict[str, Any],
    retried: tuple[Any, ...],
    distinct: tuple[Any, ...],
) -> None:
    """Claim, replay and a second key, through conditional writes on the server."""
    runs: list[dict[str, Any]] = []
    config = IdempotencyConfig(event_key_jmespath=expression, raise_on_no_idempotency_key=True)

    @idempotent(persistence_store=dynamodb_store, config=config)
    def handler(event: dict[str, Any], context: Any) -> dict[str, int]:
        runs.append(event)
        return {"run": len(runs)}

    assert {"run": 1} == handler(event, FakeLambdaContext(600_000))
    assert {"run": 1} == handler(with_change(event, retried, "resent"), FakeLambdaContext(600_000))
    assert {"run": 2} == handler(with_change(event, distinct, "other"), FakeLambdaContext(600_000))
    assert 2 == len(runs)
