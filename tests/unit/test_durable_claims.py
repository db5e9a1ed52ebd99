"""A durable claim lives as long as its execution (DESIGN §13), on the SDK's own local runner.

Execution A of an order fails one invocation in a way the SDK answers by invoking A again (a
transient serdes failure, a retryable checkpoint error, the background checkpoint thread's
error, an error after the checkpoint token was revoked, an unknown `BaseException`). A second
execution B of the same order runs between that failure and A's retry, which is held at a gate
until B has finished: B must get the in-progress answer, and the card is charged once. An
error that ends the execution releases the claim, so B runs.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyConfig,
    InMemoryPersistenceLayer,
    idempotent,
)

pytest.importorskip("aws_durable_execution_sdk_python_testing")
from aws_durable_execution_sdk_python import (
    DurableContext,
    RetryableSerDesError,
    durable_execution,
)
from aws_durable_execution_sdk_python.config import StepConfig
from aws_durable_execution_sdk_python.exceptions import (
    BackgroundThreadError,
    CheckpointError,
    DurableApiErrorCategory,
    ExecutionError,
)
from aws_durable_execution_sdk_python.serdes import JsonSerDes, SerDesContext
from aws_durable_execution_sdk_python_testing.runner import (
    DurableFunctionTestRunner,
)

ORDER = json.dumps({"order_id": "o-1", "amount": 5})


class Crash(BaseException):
    """An error the SDK does not know: the invocation ends, and the service invokes again."""


def _revoked_then(error: BaseException) -> Callable[[DurableContext], None]:
    def fail(context: DurableContext) -> None:
        context.state._checkpoint_token_revoked.set()  # what the service's answer does
        raise error

    return fail


def _raise(error: BaseException) -> Callable[[DurableContext], None]:
    def fail(context: DurableContext) -> None:
        raise error

    return fail


class FlakySerDes(JsonSerDes[Any]):
    """Serialises like the default, but the first time raises a transient failure."""

    def __init__(self) -> None:
        self.failed = False

    def serialize(self, value: Any, serdes_context: SerDesContext) -> str:
        if not self.failed:
            self.failed = True
            raise RetryableSerDesError("the offloading bucket timed out")
        return super().serialize(value, serdes_context)


class Shop:
    """``@durable_execution`` over ``@idempotent``: charge in a step, then a second step.

    ``failure`` runs once, in the first invocation of execution "A", after the charge was
    checkpointed. A's later invocations wait at ``gate`` until the test opens it.
    """

    def __init__(self, failure: Callable[[DurableContext], None] | None) -> None:
        self.charges = 0
        self.failure = failure
        self.failed = threading.Event()
        self.gate = threading.Event()
        self.serdes = FlakySerDes()
        store = InMemoryPersistenceLayer()
        invocations: dict[str, int] = {}

        @idempotent(
            persistence_store=store, config=IdempotencyConfig(event_key_jmespath="order_id")
        )
        def body(event: dict[str, Any], context: DurableContext) -> dict[str, Any]:
            def charge(_: Any) -> int:
                self.charges += 1
                return self.charges

            charged = context.step(charge, name="charge")
            if self.failure is None:
                receipt = context.step(
                    lambda _: "sent", name="receipt", config=StepConfig(serdes=self.serdes)
                )
            else:
                receipt = context.step(lambda _: "sent", name="receipt")
                if not self.failed.is_set():
                    self.failed.set()
                    self.failure(context)
            return {"order": event["order_id"], "charge": charged, "receipt": receipt}

        @durable_execution
        def handler(event: dict[str, Any], context: DurableContext) -> Any:
            arn = context.execution_context.durable_execution_arn
            invocations[arn] = invocations.get(arn, 0) + 1
            if invocations[arn] > 1 and not self.gate.is_set():
                assert self.gate.wait(60)  # A's retry waits for B
            return body(event, context)

        def runtime(event: Any, context: Any) -> Any:
            try:
                return handler(event, context)
            except Crash as exc:  # the Lambda runtime reports it as the invocation's error
                raise RuntimeError("the runtime stopped the invocation") from exc

        self.handler = runtime


@pytest.fixture
def runner_for() -> Iterator[Callable[[Shop], Any]]:
    runners: list[Any] = []
    shops: list[Shop] = []

    def make(shop: Shop) -> Any:
        runner = DurableFunctionTestRunner(handler=shop.handler)
        runners.append(runner)
        shops.append(shop)
        return runner

    yield make
    for shop in shops:
        shop.gate.set()
    for runner in runners:
        runner.close()


def status(result: Any) -> str:
    return str(getattr(result.status, "value", result.status)).rsplit(".", 1)[-1]


def run_a_then_b(runner: Any, shop: Shop) -> tuple[Any, Any]:
    """Run A up to its failing invocation, B to its end, then A to its end."""
    arn = runner.run_async(input=ORDER, execution_name="A", execution_timeout=120)
    assert (shop.failed if shop.failure is not None else _serdes_failed(shop)).wait(60)
    second = runner.run(input=ORDER, execution_name="B", execution_timeout=60)
    shop.gate.set()
    first = runner.wait_for_result(arn, timeout=60)
    return first, second


def _serdes_failed(shop: Shop) -> threading.Event:
    done = threading.Event()

    def watch() -> None:
        while not shop.serdes.failed:
            if shop.gate.wait(0.01):
                return
        done.set()

    threading.Thread(target=watch, daemon=True).start()
    return done


RETRIED = {
    "retryable serdes error": None,
    "retryable checkpoint error": _raise(CheckpointError("throttled")),
    "background checkpoint thread": _raise(
        BackgroundThreadError("checkpointing failed", CheckpointError("503"))
    ),
    "error after the token was revoked": _revoked_then(ValueError("late")),
    "unknown BaseException": _raise(Crash()),
}


@pytest.mark.parametrize("failure", list(RETRIED.values()), ids=list(RETRIED))
def test_an_error_the_sdk_retries_keeps_the_claim(
    runner_for: Callable[[Shop], Any], failure: Callable[[DurableContext], None] | None
) -> None:
    """B, started between A's failed invocation and A's retry, is refused; one charge."""
    shop = Shop(failure)
    runner = runner_for(shop)

    first, second = run_a_then_b(runner, shop)

    assert "FAILED" == status(second)
    assert "IdempotencyAlreadyInProgressError" in json.dumps(second.error.to_dict())
    assert "SUCCEEDED" == status(first)
    assert 1 == shop.charges


ENDED = {
    "handler error": _raise(ValueError("card declined")),
    "execution error": _raise(ExecutionError("bad input")),
    "non-retryable checkpoint error": _raise(
        CheckpointError("denied", error_category=DurableApiErrorCategory.EXECUTION)
    ),
}


@pytest.mark.parametrize("failure", list(ENDED.values()), ids=list(ENDED))
def test_an_error_that_ends_the_execution_releases_the_claim(
    runner_for: Callable[[Shop], Any], failure: Callable[[DurableContext], None]
) -> None:
    """A fails for good: its claim is released, and B of the same order runs."""
    shop = Shop(failure)
    shop.gate.set()
    runner = runner_for(shop)

    first = runner.run(input=ORDER, execution_name="A", execution_timeout=60)
    second = runner.run(input=ORDER, execution_name="B", execution_timeout=60)

    assert "FAILED" == status(first)
    assert "SUCCEEDED" == status(second)
    assert 2 == shop.charges
