"""`IdempotencyHandler` (Powertools' orchestrator name) runs a call once per payload."""

from __future__ import annotations

from typing import Any

from idempotent_lambda import IdempotencyConfig, InMemoryPersistenceLayer
from idempotent_lambda.base import IdempotencyHandler


def process(order: dict[str, Any], *, note: str) -> dict[str, Any]:
    """A function Powertools' decorators would hand to the handler."""
    process.runs.append(note)  # type: ignore[attr-defined]
    return {"order": order["id"], "note": note}


process.runs = []  # type: ignore[attr-defined]


def test_handle_runs_once_and_replays() -> None:
    """Two handlers for one payload: the second returns the first's result without running."""
    store = InMemoryPersistenceLayer()
    config = IdempotencyConfig(event_key_jmespath="id")
    process.runs.clear()  # type: ignore[attr-defined]

    def handler_for(note: str) -> IdempotencyHandler:
        return IdempotencyHandler(
            function=process,
            function_payload={"id": 1},
            config=config,
            persistence_store=store,
            function_args=({"id": 1},),
            function_kwargs={"note": note},
        )

    first = handler_for("first").handle()
    second = handler_for("second").handle(is_replay=True)

    assert {"order": 1, "note": "first"} == first == second
    assert ["first"] == process.runs  # type: ignore[attr-defined]


def test_key_prefix_is_the_functions_own() -> None:
    """The record's key starts with the wrapped function's module and name."""
    store = InMemoryPersistenceLayer()
    IdempotencyHandler(
        function=process,
        function_payload={"id": 2},
        config=IdempotencyConfig(),
        persistence_store=store,
        function_args=({"id": 2},),
        function_kwargs={"note": "x"},
    ).handle()

    (key,) = store._records

    assert key.startswith(f"test-func.{process.__module__}.process#")  # Powertools' own
