"""``@idempotent_step``: the SDK's ``@durable_step`` form, with the store given once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyConfig,
    IdempotencyConfigError,
    InMemoryPersistenceLayer,
    durable,
)
from idempotent_lambda._observability import Decision, Outcome
from idempotent_lambda.durable import BoundStep, idempotent_step
from tests.unit.test_durable_steps import run, status

pytest.importorskip("aws_durable_execution_sdk_python_testing")
from aws_durable_execution_sdk_python import (
    DurableContext,
    StepContext,
    durable_execution,
)


def test_a_decorated_step_runs_once_with_its_arguments_and_the_step_context() -> None:
    """The function gets the SDK's step context, then the arguments it was called with."""
    decisions: list[Decision] = []
    store = InMemoryPersistenceLayer()
    calls: list[tuple[str, int, int]] = []

    @idempotent_step(
        persistence_store=store, config=IdempotencyConfig(decision_hook=decisions.append)
    )
    def charge(step_context: StepContext, order_id: str, amount: int) -> dict[str, Any]:
        calls.append((order_id, amount, step_context.attempt))
        return {"order": order_id, "charged": amount}

    @durable_execution
    def handler(event: dict[str, Any], context: DurableContext) -> list[Any]:
        return [durable.step(context, charge(order, 5)) for order in event["orders"]]

    result = run(handler, {"orders": ["o-1", "o-2"]})

    assert "SUCCEEDED" == status(result)
    assert [{"order": "o-1", "charged": 5}, {"order": "o-2", "charged": 5}] == json.loads(
        result.result
    )
    assert [("o-1", 5, 1), ("o-2", 5, 1)] == calls
    claimed = [d.function for d in decisions if d.outcome is Outcome.CLAIMED]
    assert ["durable step charge", "durable step charge"] == claimed


def test_the_name_and_settings_can_be_given_at_either_place() -> None:
    """``name=`` on the decorator names the step; ``step``'s own arguments win over it."""
    store, other = InMemoryPersistenceLayer(), InMemoryPersistenceLayer()

    @idempotent_step(persistence_store=store, name="capture")
    def charge(step_context: Any) -> str:
        return durable.step_key()

    bound = charge()
    assert isinstance(bound, BoundStep)
    assert ("capture", store) == (bound.name, bound.persistence_store)

    @durable_execution
    def handler(event: dict[str, Any], context: DurableContext) -> list[str]:
        return [
            durable.step(context, charge()),
            durable.step(context, charge(), name="refund", persistence_store=other),
        ]

    result = run(handler, {})

    assert "SUCCEEDED" == status(result)
    default_key, overridden_key = json.loads(result.result)
    assert default_key != overridden_key
    assert store.get(default_key) is not None
    assert other.get(overridden_key) is not None
    assert store.get(overridden_key) is None


def test_a_decorator_without_a_usable_store_is_refused_at_once() -> None:
    """Bad settings raise where the step is defined, not in the middle of an execution."""
    with pytest.raises(IdempotencyConfigError):
        idempotent_step(persistence_store=object())  # type: ignore[arg-type]
    with pytest.raises(IdempotencyConfigError):
        durable.step(object(), lambda _: 1, name="x")
