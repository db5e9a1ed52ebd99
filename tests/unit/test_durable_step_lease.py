"""The step lease against the SDK's retry budget, on the SDK's local runner.

An invocation dies inside a step (a crash: no code of ours runs after it), and its claim stays
IN_PROGRESS until its lease ends: the invocation's deadline, up to 15 minutes later. The SDK's
default retry strategy spends its 6 attempts in about a minute, so a step that met the claim
with `IdempotencyAlreadyInProgressError` on each attempt failed for good, although nothing ran
twice. A durable step now waits for an earlier invocation's claim as long as its own invocation
can; a later invocation's deadline is never before the dead one's, so it outwaits the lease,
takes the key over and runs the step, without asking the retry strategy.

The store's clock is a `ManualClock`, moved past the lease once the step is seen waiting: the
runner's Lambda context always reports 15 minutes left.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from idempotent_lambda import InMemoryPersistenceLayer, durable
from idempotent_lambda.testing import ManualClock
from tests.unit.test_durable_steps import STOPPED_AFTER_S, Stall, run, status

pytest.importorskip("aws_durable_execution_sdk_python_testing")
from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python.config import StepConfig
from aws_durable_execution_sdk_python.retries import RetryPresets

#: The runner's Lambda context: 15 minutes left in every invocation.
RUNNER_REMAINING_S = 900


class WatchedStore(InMemoryPersistenceLayer):
    """An in-memory store that tells when a waiter polls it (only a waiter reads)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.polled = threading.Event()

    def get(self, *args: Any, **kwargs: Any) -> Any:
        self.polled.set()
        return super().get(*args, **kwargs)


@pytest.fixture
def stall() -> Any:
    stalled = Stall()
    yield stalled
    stalled.release.set()


def test_a_step_whose_invocation_died_inside_it_runs_without_spending_retries(
    stall: Stall,
) -> None:
    """The next invocation waits out the dead claim's lease, then runs the step: SUCCEEDED."""
    clock = ManualClock()
    store = WatchedStore(clock)
    default = RetryPresets.default()
    asked: list[str] = []
    calls: list[int] = []

    def strategy(error: Exception, attempts: int) -> Any:
        asked.append(type(error).__name__)
        return default(error, attempts)

    @durable_execution
    def handler(event: dict[str, Any], context: DurableContext) -> str:
        def charge(_: Any) -> str:
            calls.append(1)
            stall()  # the first invocation dies here
            return "charged"

        return durable.step(
            context,
            charge,
            name="charge",
            persistence_store=store,
            step_config=StepConfig(retry_strategy=strategy),
        )

    def lease_ends_once_waited_on() -> None:
        if store.polled.wait(60):
            clock.advance(RUNNER_REMAINING_S + 2)

    mover = threading.Thread(target=lease_ends_once_waited_on, daemon=True)
    mover.start()
    result = run(handler, {}, invocation_timeout=STOPPED_AFTER_S)

    assert "SUCCEEDED" == status(result), result.error
    assert "charged" == json.loads(result.result)
    assert 2 == len(calls)  # the dead attempt, then the one that took the key over
    assert [] == asked
