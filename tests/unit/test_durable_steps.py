"""Durable steps on the SDK's own local runner (`DurableFunctionTestRunner`), no AWS."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyConfig,
    IdempotencyConfigError,
    IdempotencyValidationError,
    InMemoryPersistenceLayer,
    durable,
)
from idempotent_lambda._observability import Decision, Outcome
from idempotent_lambda.durable import ClaimsPlugin
from idempotent_lambda.record import IdempotencyRecord

sdk = pytest.importorskip("aws_durable_execution_sdk_python")
runner_module = pytest.importorskip("aws_durable_execution_sdk_python_testing.runner")
from aws_durable_execution_sdk_python import DurableContext, durable_execution  # noqa: E402
from aws_durable_execution_sdk_python.config import StepConfig, StepSemantics  # noqa: E402
from aws_durable_execution_sdk_python.retries import (  # noqa: E402
    RetryStrategyConfig,
    create_retry_strategy,
)

DurableFunctionTestRunner = runner_module.DurableFunctionTestRunner
SUCCEEDED = "SUCCEEDED"
#: The runner's invocation timeout where a stalled call stands for Lambda stopping it. Only the
#: stalled invocation may reach it: 3 s leaves a loaded machine room for every other one.
STOPPED_AFTER_S = 3


class Stall:
    """Holds one call past the runner's invocation timeout: the invocation ends, unrecorded.

    That is how the SDK sees Lambda stop an invocation (a timeout, a crash): no checkpoint
    follows, and the runner invokes the execution again. The stalled thread is let go at the
    end of the test, after the execution finished.
    """

    def __init__(self) -> None:
        self.armed = True
        self.release = threading.Event()

    def __call__(self) -> None:
        if self.armed:
            self.armed = False
            self.release.wait(60)


@pytest.fixture
def stall() -> Iterator[Stall]:
    stalled = Stall()
    yield stalled
    stalled.release.set()


class StallingStore(InMemoryPersistenceLayer):
    """An in-memory store whose first completion is written, then stalls its invocation."""

    def __init__(self, stall: Stall) -> None:
        super().__init__()
        self._stall = stall

    def complete(self, record: IdempotencyRecord) -> bool:
        written = super().complete(record)
        self._stall()
        return written


def run(handler: Any, payload: Any, *, invocation_timeout: int = 900, name: str = "e1") -> Any:
    with DurableFunctionTestRunner(handler=handler, invocation_timeout=invocation_timeout) as r:
        return r.run(input=json.dumps(payload), execution_timeout=120, execution_name=name)


def status(result: Any) -> str:
    return str(getattr(result.status, "value", result.status)).rsplit(".", 1)[-1]


def test_two_steps_run_each_side_effect_once_and_return_the_checkpointed_results() -> None:
    """Each step's side effect runs once; the execution's result is what the steps returned."""
    store = InMemoryPersistenceLayer()
    effects: list[str] = []

    @durable_execution
    def handler(event: dict[str, Any], context: DurableContext) -> dict[str, Any]:
        def charge(_: Any) -> dict[str, Any]:
            effects.append("charge")
            return {"charged": event["amount"]}

        def email(_: Any) -> str:
            effects.append("email")
            return "sent"

        charged = durable.step(context, charge, name="charge", persistence_store=store)
        mailed = durable.step(context, email, name="email", persistence_store=store)
        return {"charge": charged, "email": mailed}

    result = run(handler, {"amount": 5})

    assert SUCCEEDED == status(result)
    assert {"charge": {"charged": 5}, "email": "sent"} == json.loads(result.result)
    assert ["charge", "email"] == effects


SEMANTICS = pytest.mark.parametrize(
    "semantics", list(StepSemantics), ids=lambda semantics: semantics.value
)


@SEMANTICS
def test_an_attempt_stopped_after_the_side_effect_runs_it_twice_with_context_step_alone(
    stall: Stall, semantics: StepSemantics
) -> None:
    """The SDK alone, either semantics: a stop before the step's checkpoint runs it again.

    At least once: the next invocation reruns the step. At most once: the attempt fails as
    interrupted, and the retry strategy runs it again.
    """
    charges: list[int] = []

    @durable_execution
    def handler(event: dict[str, Any], context: DurableContext) -> int:
        def charge(_: Any) -> int:
            charges.append(1)
            stall()
            return len(charges)

        return context.step(charge, name="charge", config=StepConfig(step_semantics=semantics))

    result = run(handler, {"order": 1}, invocation_timeout=STOPPED_AFTER_S)

    assert SUCCEEDED == status(result)
    assert 2 == len(charges)


@SEMANTICS
def test_an_attempt_stopped_after_the_side_effect_replays_our_record(
    stall: Stall, semantics: StepSemantics
) -> None:
    """With `durable.step`, either semantics: the rerun replays our record; one charge."""
    store = StallingStore(stall)
    charges: list[int] = []

    @durable_execution
    def handler(event: dict[str, Any], context: DurableContext) -> int:
        def charge(_: Any) -> int:
            charges.append(1)
            return len(charges)

        return durable.step(
            context,
            charge,
            name="charge",
            persistence_store=store,
            step_config=StepConfig(step_semantics=semantics),
        )

    result = run(handler, {"order": 1}, invocation_timeout=STOPPED_AFTER_S)

    assert SUCCEEDED == status(result)
    assert 1 == len(charges)
    assert 1 == json.loads(result.result)


@pytest.mark.parametrize("plugins", [None, [ClaimsPlugin()]], ids=["alone", "claims plugin"])
def test_a_failing_step_is_retried_by_the_sdk_and_succeeds_once(plugins: list[Any] | None) -> None:
    """func raising releases the record, so the SDK's retry strategy runs it again.

    With ClaimsPlugin too: a step's claim is its invocation's, so its release is not held.
    """
    store = InMemoryPersistenceLayer()
    attempts: list[int] = []
    retry = StepConfig(retry_strategy=create_retry_strategy(RetryStrategyConfig(max_attempts=3)))

    @durable_execution(plugins=plugins)
    def handler(event: dict[str, Any], context: DurableContext) -> str:
        def flaky(_: Any) -> str:
            attempts.append(1)
            if len(attempts) == 1:
                raise RuntimeError("partner API answered 503")
            return "ok"

        return durable.step(
            context, flaky, name="flaky", persistence_store=store, step_config=retry
        )

    result = run(handler, {})

    assert SUCCEEDED == status(result)
    assert "ok" == json.loads(result.result)
    assert 2 == len(attempts)


def test_two_executions_never_share_a_step_record() -> None:
    """The same step in two executions runs in both, under two different keys."""
    store = InMemoryPersistenceLayer()
    keys: list[str] = []

    @durable_execution
    def handler(event: dict[str, Any], context: DurableContext) -> str:
        def charge(_: Any) -> str:
            keys.append(durable.step_key())
            return "charged"

        return durable.step(context, charge, name="charge", persistence_store=store)

    for name in ("first", "second"):
        assert SUCCEEDED == status(run(handler, {"order": 1}, name=name))

    assert 2 == len(set(keys))


def test_a_step_name_used_twice_in_one_execution_runs_each_step_once() -> None:
    """Two steps with one name in one context have a record each: both run, once each."""
    store = InMemoryPersistenceLayer()
    runs: list[str] = []
    keys: list[str] = []

    def effect(label: str) -> Any:
        def run_it(_: Any) -> str:
            runs.append(label)
            keys.append(durable.step_key())
            return label

        return run_it

    @durable_execution
    def handler(event: dict[str, Any], context: DurableContext) -> list[str]:
        first = durable.step(context, effect("a"), name="same", persistence_store=store)
        second = durable.step(context, effect("b"), name="same", persistence_store=store)
        return [first, second]

    result = run(handler, {})

    assert SUCCEEDED == status(result)
    assert ["a", "b"] == json.loads(result.result)
    assert ["a", "b"] == runs
    assert 2 == len(set(keys))


def test_step_round_trips_are_two_first_and_one_on_replay(stall: Stall) -> None:
    """A rerun after a stop replays with one claim (the first run's 2 are counted below).

    The stopped invocation never reports its decision: it is held inside its completion.
    """
    store = StallingStore(stall)
    decisions: list[Decision] = []
    config = IdempotencyConfig(decision_hook=decisions.append)

    @durable_execution
    def handler(event: dict[str, Any], context: DurableContext) -> int:
        return durable.step(
            context, lambda _: 1, name="charge", persistence_store=store, config=config
        )

    result = run(handler, {}, invocation_timeout=STOPPED_AFTER_S)

    assert SUCCEEDED == status(result)
    assert [(Outcome.REPLAYED, 1)] == [(d.outcome, d.store_calls) for d in decisions]


def test_decisions_name_the_execution_and_the_step() -> None:
    """The decision hook (and the log line) carries the step's name and its execution's ARN."""
    decisions: list[Decision] = []
    store = InMemoryPersistenceLayer()
    config = IdempotencyConfig(decision_hook=decisions.append)
    arns: list[str] = []

    @durable_execution
    def handler(event: dict[str, Any], context: DurableContext) -> str:
        arns.append(context.execution_context.durable_execution_arn)
        return durable.step(
            context, lambda _: "ok", name="charge", persistence_store=store, config=config
        )

    assert SUCCEEDED == status(run(handler, {}))

    claimed = [d for d in decisions if d.outcome is Outcome.CLAIMED]
    assert 1 == len(claimed)
    assert "durable step charge" == claimed[0].function
    assert 2 == claimed[0].store_calls  # a first run: claim and complete
    assert arns[0] == claimed[0].execution


# --- The same contract against a stand-in with only the SDK's public surface ---


class StandInContext:
    """``execution_context.durable_execution_arn`` and ``step(func, name=, config=)``: no SDK.

    Checkpoints by name in a dict shared across invocations, as the service would.
    """

    def __init__(self, arn: str, checkpoints: dict[str, Any]) -> None:
        self.execution_context = type("ExecutionContext", (), {"durable_execution_arn": arn})()
        self.lambda_context = None
        self.checkpoints = checkpoints

    def step(self, func: Any, name: str | None = None, config: Any = None) -> Any:
        if name in self.checkpoints:
            return self.checkpoints[name]
        result = func(object())
        self.checkpoints[str(name)] = result
        return result


def scope_of(context: StandInContext) -> dict[str, Any]:
    """The checkpoints a later invocation of ``context``'s execution finds: its scope's only."""
    return {durable.SCOPE_STEP_NAME: context.checkpoints[durable.SCOPE_STEP_NAME]}


def test_stand_in_a_rerun_without_checkpoint_replays_the_record() -> None:
    """A checkpoint lost after the step ran: the next invocation replays our record."""
    store = InMemoryPersistenceLayer()
    runs: list[str] = []

    def charge(_: Any) -> str:
        runs.append(durable.step_key())
        return "charged"

    first = StandInContext("arn:exec/1", {})
    assert "charged" == durable.step(first, charge, name="charge", persistence_store=store)
    # The step's checkpoint never reached the service; the scope's, taken before, did.
    second = StandInContext("arn:exec/1", scope_of(first))
    assert "charged" == durable.step(second, charge, name="charge", persistence_store=store)

    assert 1 == len(runs)


def test_stand_in_inputs_are_validated_when_given() -> None:
    """A rerun of a step with other inputs is refused: it is not the same request."""
    store = InMemoryPersistenceLayer()
    first = StandInContext("arn:exec/2", {})
    durable.step(
        first,
        lambda _: "ok",
        name="charge",
        persistence_store=store,
        payload={"amount": 5},
    )

    with pytest.raises(IdempotencyValidationError):
        durable.step(
            StandInContext("arn:exec/2", scope_of(first)),
            lambda _: "ok",
            name="charge",
            persistence_store=store,
            payload={"amount": 6},
        )


def test_stand_in_refusals_are_configuration_errors() -> None:
    """A plain Lambda context, a key expression, or step_key() outside a step: refused."""
    store = InMemoryPersistenceLayer()
    with pytest.raises(IdempotencyConfigError):
        durable.step(object(), lambda _: 1, name="x", persistence_store=store)
    with pytest.raises(IdempotencyConfigError):
        durable.step(
            StandInContext("arn:exec/3", {}),
            lambda _: 1,
            name="x",
            persistence_store=store,
            config=IdempotencyConfig(event_key_jmespath="id"),
        )
    with pytest.raises(IdempotencyConfigError):
        durable.step_key()


def test_stand_in_a_concurrent_rerun_waits_for_the_running_step() -> None:
    """Two invocations of one execution run a step at once: one runs it, the other waits.

    With ``wait_for_in_progress_seconds`` the second gets the first one's result; the side
    effect runs once. Real threads on one key.
    """
    polled = threading.Event()

    class PolledStore(InMemoryPersistenceLayer):
        def get(self, *args: Any, **kwargs: Any) -> Any:
            polled.set()  # only a waiter reads: the second invocation is waiting
            return super().get(*args, **kwargs)

    store = PolledStore()
    config = IdempotencyConfig(wait_for_in_progress_seconds=60)
    entered, release = threading.Event(), threading.Event()
    runs: list[str] = []
    results: dict[str, Any] = {}

    def charge(_: Any) -> str:
        runs.append("charge")
        entered.set()
        assert release.wait(60)
        return "charged once"

    def invocation(name: str) -> None:
        context = StandInContext("arn:exec/wait", {durable.SCOPE_STEP_NAME: "root"})
        results[name] = durable.step(
            context, charge, name="charge", persistence_store=store, config=config
        )

    first = threading.Thread(target=invocation, args=("first",))
    first.start()
    assert entered.wait(60)
    second = threading.Thread(target=invocation, args=("second",))
    second.start()
    assert polled.wait(60)
    release.set()
    first.join(60)
    second.join(60)

    assert ["charge"] == runs
    assert {"first": "charged once", "second": "charged once"} == results
