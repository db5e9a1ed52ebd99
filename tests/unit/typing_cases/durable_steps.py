"""Checked by mypy --strict in test_durable_typing.py: never imported by the tests."""

from typing import Any

from typing_extensions import assert_type

from idempotent_lambda import InMemoryPersistenceLayer
from idempotent_lambda.durable import BoundStep, idempotent_step, step

store = InMemoryPersistenceLayer()


@idempotent_step(persistence_store=store)
def charge(step_context: Any, order_id: str, amount: int) -> dict[str, int]:
    return {"amount": amount}


def workflow(context: Any) -> None:
    bound = charge("o-1", 5)
    assert_type(bound, BoundStep[dict[str, int]])
    assert_type(step(context, bound), dict[str, int])
    assert_type(step(context, lambda _: 1, name="n", persistence_store=store), int)
    charge("o-1", "five")  # type: ignore[arg-type]
    charge("o-1")  # type: ignore[call-arg]
