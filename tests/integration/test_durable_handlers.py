"""``@durable_execution`` over ``@idempotent`` on the SDK's local runner, on real stores.

An execution suspends on a callback (the service ends the invocation; a later one replays), so
the test starts a second execution with the same payload while the first is suspended, with no
timing involved. The mixed-fleet cases serve one execution's invocations from a Powertools copy
and from ours, as a rolling deploy would, on one DynamoDB table or redis-server.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from idempotent_lambda import IdempotencyConfig, durable, idempotent
from idempotent_lambda._durable_context import DURABLE_LEASE_SECONDS
from tests.integration._two_libraries import BACKENDS, fleet_on, wall_ms

pt = pytest.importorskip("aws_lambda_powertools.utilities.idempotency")
pytest.importorskip("aws_durable_execution_sdk_python_testing")
from aws_durable_execution_sdk_python import DurableContext, durable_execution  # noqa: E402
from aws_durable_execution_sdk_python_testing.runner import (  # noqa: E402
    DurableFunctionTestRunner,
)

ORDER = json.dumps({"order_id": "o-1", "amount": 5})


class Shop:
    """One durable handler, decorated by each library; ``serving`` picks the copy per call."""

    def __init__(self, powertools_store: Any, our_store: Any) -> None:
        self.charges = 0
        self.serving = "ours"

        def body(event: dict[str, Any], context: DurableContext) -> dict[str, Any]:
            def charge(_: Any) -> int:
                self.charges += 1
                return self.charges

            charged = context.step(charge, name="charge")
            context.create_callback(name="approval").result()  # suspends until approved
            return {"order": event["order_id"], "charge": charged}

        self.copies: dict[str, Callable[..., Any]] = {
            "ours": idempotent(
                persistence_store=our_store,
                config=IdempotencyConfig(event_key_jmespath="order_id"),
            )(body),
        }
        if powertools_store is not None:
            self.copies["powertools"] = pt.idempotent(
                persistence_store=powertools_store,
                config=pt.IdempotencyConfig(event_key_jmespath="order_id"),
            )(body)

        @durable_execution
        def handler(event: dict[str, Any], context: DurableContext) -> Any:
            return self.copies[self.serving](event, context)

        self.handler = handler


@pytest.fixture
def runner_for() -> Iterator[Callable[[Shop], Any]]:
    runners: list[Any] = []

    def make(shop: Shop) -> Any:
        runner = DurableFunctionTestRunner(handler=shop.handler)
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        runner.close()


def status(result: Any) -> str:
    return str(getattr(result.status, "value", result.status)).rsplit(".", 1)[-1]


def suspended_first_execution(runner: Any) -> tuple[str, str]:
    """Start execution "first" and return its ARN and callback id once it is suspended."""
    arn = runner.run_async(input=ORDER, execution_name="first", execution_timeout=120)
    return arn, runner.wait_for_callback(arn, name="approval", timeout=60)


@pytest.mark.parametrize(
    ("first", "replay", "second"),
    [
        ("ours", "ours", "ours"),
        ("powertools", "ours", "ours"),
        ("ours", "powertools", "ours"),
        ("ours", "ours", "powertools"),
        ("powertools", "powertools", "ours"),
    ],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_duplicate_start_during_a_suspension_charges_once(
    request: pytest.FixtureRequest,
    runner_for: Callable[[Shop], Any],
    backend: str,
    first: str,
    replay: str,
    second: str,
) -> None:
    """The suspended execution keeps its claim, its replay goes on, the duplicate is refused.

    Each copy may serve each part: the first invocation, the replay after the callback, and
    the duplicate execution. A third execution after completion gets the stored result.
    """
    fleet = fleet_on(request, backend)
    shop = Shop(fleet.powertools_store(), fleet.our_store(_system_clock()))
    runner = runner_for(shop)

    shop.serving = first
    arn, callback = suspended_first_execution(runner)
    shop.serving = second
    duplicate = runner.run(input=ORDER, execution_name="duplicate", execution_timeout=60)
    shop.serving = replay
    runner.send_callback_success(callback, result=b'"approved"')
    finished = runner.wait_for_result(arn, timeout=60)
    shop.serving = second
    later = runner.run(input=ORDER, execution_name="later", execution_timeout=60)

    assert "FAILED" == status(duplicate)
    assert "SUCCEEDED" == status(finished)
    assert {"order": "o-1", "charge": 1} == json.loads(finished.result)
    assert "SUCCEEDED" == status(later)
    assert json.loads(finished.result) == json.loads(later.result)
    assert 1 == shop.charges


def test_a_suspended_claim_lasts_as_long_as_a_durable_execution_can(
    request: pytest.FixtureRequest, runner_for: Callable[[Shop], Any]
) -> None:
    """While suspended, the record is IN_PROGRESS with a lease of a year, not 15 minutes."""
    fleet = fleet_on(request, "dynamodb")
    shop = Shop(None, fleet.our_store(_system_clock()))
    runner = runner_for(shop)
    before = wall_ms()

    arn, callback = suspended_first_execution(runner)
    (item,) = fleet.read_raw()
    runner.send_callback_success(callback, result=b'"approved"')
    runner.wait_for_result(arn, timeout=60)

    assert "INPROGRESS" == item["status"]["S"]
    lease_end = int(item["in_progress_expiration"]["N"])
    assert lease_end >= before + (DURABLE_LEASE_SECONDS - 60) * 1000


@pytest.mark.parametrize("backend", ["memory", *BACKENDS])
@pytest.mark.parametrize("record_format", ["powertools", "native"])
def test_a_durable_step_runs_once_on_every_store_and_format(
    request: pytest.FixtureRequest, backend: str, record_format: str
) -> None:
    """Two invocations of one execution, the first stopped before its checkpoint: one run."""
    if backend == "memory":
        from idempotent_lambda import InMemoryPersistenceLayer

        store: Any = InMemoryPersistenceLayer()
    else:
        store = fleet_on(request, backend).our_store(_system_clock())
    config = IdempotencyConfig(record_format=record_format)
    runs: list[str] = []

    class Context:  # the SDK's public surface; the checkpoint of the first run is lost
        execution_context = type("Execution", (), {"durable_execution_arn": "arn:exec/1"})()
        lambda_context = None

        def step(self, func: Any, name: str | None = None, config: Any = None) -> Any:
            if name == durable.SCOPE_STEP_NAME:  # checkpointed before the side effect
                return "root"
            return func(None)

    def charge(_: Any) -> dict[str, Any]:
        runs.append(durable.step_key())
        return {"charged": 5, "empty": {}, "zero": 0}

    results = [
        durable.step(Context(), charge, name="charge", persistence_store=store, config=config)
        for _ in range(2)
    ]

    assert 1 == len(runs)
    assert results[0] == results[1] == {"charged": 5, "empty": {}, "zero": 0}


def _system_clock() -> Any:
    from idempotent_lambda._clock import SYSTEM_CLOCK

    return SYSTEM_CLOCK
