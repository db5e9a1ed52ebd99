"""A durable step's key can never be another step's (DESIGN §13), on the SDK's local runner.

The natural fan-out writes one fixed step name in every branch of ``map``, ``parallel`` or
``run_in_child_context``. Each branch's side effect must run once, with its own result, in the
first invocation and in a replay that reruns a branch whose checkpoint was lost.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest

from idempotent_lambda import InMemoryPersistenceLayer, durable
from tests.unit.test_durable_steps import STOPPED_AFTER_S, Stall, StallingStore, run, status

pytest.importorskip("aws_durable_execution_sdk_python_testing")
from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python.config import MapConfig, NestingType

ORDERS = ["o-1", "o-2", "o-3"]


class Charges:
    """The payment provider: counts charges per order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_order: dict[str, int] = {}

    def charge(self, order: str) -> Callable[[Any], str]:
        def run_it(_: Any) -> str:
            with self.lock:
                self.by_order[order] = self.by_order.get(order, 0) + 1
            return f"charged {order}"

        return run_it


def charged_results(result: Any) -> list[str]:
    return sorted(json.loads(result.result))


def fan_outs(store: Any, charges: Charges) -> dict[str, Callable[[DurableContext], list[str]]]:
    """The same fixed-name step, fanned out with each of the SDK's three ways."""

    def one(ctx: DurableContext, order: str) -> str:
        return durable.step(ctx, charges.charge(order), name="charge", persistence_store=store)

    def with_map(context: DurableContext) -> list[str]:
        batch = context.map(ORDERS, lambda ctx, order, *_: one(ctx, order))
        return list(batch.get_results())

    def with_flat_map(context: DurableContext) -> list[str]:
        batch = context.map(
            ORDERS, lambda ctx, order, *_: one(ctx, order), config=_flat_map_config()
        )
        return list(batch.get_results())

    def with_parallel(context: DurableContext) -> list[str]:
        branches = [(lambda ctx, order=order: one(ctx, order)) for order in ORDERS]
        return list(context.parallel(branches).get_results())

    def with_child_contexts(context: DurableContext) -> list[str]:
        return [
            context.run_in_child_context(lambda ctx, order=order: one(ctx, order))
            for order in ORDERS
        ]

    def in_a_loop(context: DurableContext) -> list[str]:
        return [one(context, order) for order in ORDERS]

    return {
        "map": with_map,
        "flat map": with_flat_map,
        "parallel": with_parallel,
        "run_in_child_context": with_child_contexts,
        "loop": in_a_loop,
    }


def _flat_map_config() -> Any:
    return MapConfig(nesting_type=NestingType.FLAT)  # branches are virtual child contexts


KINDS = list(fan_outs(None, Charges()))


@pytest.mark.parametrize("kind", KINDS)
def test_a_fixed_step_name_in_every_branch_charges_each_order_once(kind: str) -> None:
    """Each branch runs its own side effect once and gets its own result."""
    store, charges = InMemoryPersistenceLayer(), Charges()
    body = fan_outs(store, charges)[kind]

    @durable_execution
    def handler(event: dict[str, Any], context: DurableContext) -> list[str]:
        return body(context)

    result = run(handler, {})

    assert "SUCCEEDED" == status(result)
    assert [f"charged {order}" for order in ORDERS] == charged_results(result)
    assert dict.fromkeys(ORDERS, 1) == charges.by_order


@pytest.mark.parametrize("kind", KINDS)
def test_a_branch_rerun_after_a_lost_checkpoint_replays_its_own_record(
    stall: Stall, kind: str
) -> None:
    """The invocation stops after one branch's record was completed, before its checkpoint.

    The next invocation replays the execution: that branch reruns and replays its own record
    (never another branch's), and every order is still charged once.
    """
    store, charges = StallingStore(stall), Charges()
    body = fan_outs(store, charges)[kind]

    @durable_execution
    def handler(event: dict[str, Any], context: DurableContext) -> list[str]:
        return body(context)

    result = run(handler, {}, invocation_timeout=STOPPED_AFTER_S)

    assert "SUCCEEDED" == status(result)
    assert [f"charged {order}" for order in ORDERS] == charged_results(result)
    assert dict.fromkeys(ORDERS, 1) == charges.by_order
    assert not stall.armed  # the stop did happen


@pytest.fixture
def stall() -> Any:
    stalled = Stall()
    yield stalled
    stalled.release.set()
