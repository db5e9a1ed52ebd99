"""A durable replay's result is the first run's, down to its JSON text; the testing kit's stop.

The first run of an idempotent body under a durable execution returns its result as a replay
would (decoded from its stored form), so the runner's ``result.result`` strings of a first run
and of a replay are equal whatever the record format orders keys by.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from idempotent_lambda import IdempotencyConfig, InMemoryPersistenceLayer, durable, idempotent
from tests.unit.test_durable_steps import run, status

pytest.importorskip("aws_durable_execution_sdk_python_testing")
from aws_durable_execution_sdk_python import DurableContext, durable_execution

from idempotent_lambda.testing.durable import stop_after_step

#: Keys out of alphabetical order: Powertools' format stores them sorted.
UNSORTED = {"zone": "eu", "amount": 5, "nested": {"y": 1, "b": [{"z": 0, "a": 1}]}}


@pytest.mark.parametrize("record_format", ["powertools", "native"])
def test_a_second_execution_returns_the_first_ones_json_text(record_format: str) -> None:
    """``@idempotent`` under ``@durable_execution``: the replay's text is the first run's."""
    store = InMemoryPersistenceLayer()
    config = IdempotencyConfig(event_key_jmespath="order_id", record_format=record_format)

    @durable_execution
    @idempotent(persistence_store=store, config=config)
    def handler(event: dict[str, Any], context: DurableContext) -> dict[str, Any]:
        return dict(UNSORTED)

    first = run(handler, {"order_id": "o-1"}, name="first")
    again = run(handler, {"order_id": "o-1"}, name="again")

    assert "SUCCEEDED" == status(first) == status(again)
    assert first.result == again.result
    assert UNSORTED == json.loads(first.result)


@pytest.mark.parametrize("record_format", ["powertools", "native"])
def test_a_step_replayed_from_its_record_returns_the_first_runs_json_text(
    record_format: str,
) -> None:
    """A step stopped before its checkpoint replays our record: the same text as a clean run."""
    config = IdempotencyConfig(record_format=record_format)
    charges: list[int] = []

    def workflow(store: Any) -> Any:
        @durable_execution
        def handler(event: dict[str, Any], context: DurableContext) -> dict[str, Any]:
            def charge(_: Any) -> dict[str, Any]:
                charges.append(1)
                return dict(UNSORTED)

            return durable.step(
                context, charge, name="charge", persistence_store=store, config=config
            )

        return handler

    clean = run(workflow(InMemoryPersistenceLayer()), {})
    with stop_after_step("charge") as stop:
        replayed = run(workflow(InMemoryPersistenceLayer()), {}, invocation_timeout=3)

    assert 1 == stop.stopped
    assert "SUCCEEDED" == status(clean) == status(replayed)
    assert clean.result == replayed.result
    assert 2 == len(charges)  # once per execution: the stopped one's rerun replayed


def test_stop_after_step_stops_only_the_named_step() -> None:
    """A stop for another name leaves this step alone; the block counts what it stopped."""
    store = InMemoryPersistenceLayer()

    @durable_execution
    def handler(event: dict[str, Any], context: DurableContext) -> str:
        return durable.step(context, lambda _: "ok", name="charge", persistence_store=store)

    with stop_after_step("refund") as stop:
        result = run(handler, {})

    assert "SUCCEEDED" == status(result)
    assert 0 == stop.stopped
    with pytest.raises(ValueError, match="times"), stop_after_step(times=0):
        pass
