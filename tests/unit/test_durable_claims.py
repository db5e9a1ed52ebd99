"""A durable claim lives as long as its execution (DESIGN §13), on the SDK's own local runner.

Execution A of an order fails one invocation in a way the SDK answers by invoking A again (a
transient serdes failure, a retryable checkpoint error, the background checkpoint thread's
error, an error after the checkpoint token was revoked, an unknown `BaseException`). A second
execution B of the same order runs once that invocation has ended and before A's retry, which is
held at a gate until B has finished: B must get the in-progress answer, and the card is charged
once. An error that ends the execution releases the claim, so B runs.

Each case runs without a plugin (DESIGN §13) and with `ClaimsPlugin` registered (§14), which
holds a release until the SDK's final answer: one case (a revocation the SDK finds after the
body raised) passes only with it.

The checkpoint failures come from the SDK's own checkpoint thread: the service client the runner
hands the SDK answers one checkpoint call as the Lambda API does when it fails (a botocore answer
read by the SDK's own `LambdaClient`). The revocation is the runner's own `pause_execution`.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyConfig,
    InMemoryPersistenceLayer,
    Outcome,
    idempotent,
)
from idempotent_lambda.durable import ClaimsPlugin

pytest.importorskip("aws_durable_execution_sdk_python_testing")
import boto3
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
    SuspendExecution,
)
from aws_durable_execution_sdk_python.execution import (
    DurableExecutionInvocationInputWithClient,
)
from aws_durable_execution_sdk_python.lambda_service import (
    CheckpointOutput,
    DurableServiceClient,
    LambdaClient,
    OperationAction,
    OperationUpdate,
    StateOutput,
)
from aws_durable_execution_sdk_python.serdes import JsonSerDes, SerDesContext
from aws_durable_execution_sdk_python_testing.execution import Execution
from aws_durable_execution_sdk_python_testing.runner import (
    DurableFunctionTestRunner,
)
from aws_durable_execution_sdk_python_testing.stores.memory import (
    InMemoryExecutionStore,
)
from botocore.stub import Stubber

ORDER = json.dumps({"order_id": "o-1", "amount": 5})
#: Each test of what releases a claim runs without the plugin (DESIGN §13) and with it (§14).
PLUGINS = pytest.mark.parametrize("plugins", [None, [ClaimsPlugin()]], ids=["alone", "plugin"])


class Crash(BaseException):
    """An error the SDK does not know: the invocation ends, and the service invokes again."""


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


class Forwarding:
    """A Lambda API that passes every call on to the runner's ``service``; the fault-injecting
    APIs below answer some checkpoint calls themselves."""

    def __init__(self, service: DurableServiceClient) -> None:
        self.service = service

    def checkpoint(
        self,
        durable_execution_arn: str,
        checkpoint_token: str,
        updates: list[OperationUpdate],
        client_token: str | None,
    ) -> CheckpointOutput:
        return self.service.checkpoint(
            durable_execution_arn, checkpoint_token, updates, client_token
        )

    def get_execution_state(
        self,
        durable_execution_arn: str,
        checkpoint_token: str,
        next_marker: str,
        max_items: int = 1000,
    ) -> StateOutput:
        return self.service.get_execution_state(
            durable_execution_arn, checkpoint_token, next_marker, max_items
        )


class FailingCheckpoint:
    """The Lambda API failing one checkpoint call: the first that carries "receipt"'s ``action``.

    Every other call reaches the runner's checkpoint service. The failed one goes through the
    SDK's own `LambdaClient` over a boto3 client whose answer is the service's error (``code``,
    HTTP ``status``), so the SDK classifies it as it would in AWS; it fails in the SDK's
    background checkpoint thread, as a real one does.
    """

    def __init__(self, action: OperationAction, code: str, status: int) -> None:
        self.action = action
        self.fired = threading.Event()
        lambda_api = boto3.client(
            "lambda", region_name="us-west-2", aws_access_key_id="k", aws_secret_access_key="s"
        )
        answer = Stubber(lambda_api)
        answer.add_client_error(
            "checkpoint_durable_execution", code, "the service failed", http_status_code=status
        )
        answer.activate()
        self.failing_api = LambdaClient(client=lambda_api)

    def around(self, service: DurableServiceClient) -> DurableServiceClient:
        fault = self

        class Service(Forwarding):
            def checkpoint(
                self,
                durable_execution_arn: str,
                checkpoint_token: str,
                updates: list[OperationUpdate],
                client_token: str | None,
            ) -> CheckpointOutput:
                hit = any(u.name == "receipt" and u.action is fault.action for u in updates)
                if hit and not fault.fired.is_set():
                    fault.fired.set()
                    return fault.failing_api.checkpoint(
                        durable_execution_arn, checkpoint_token, updates, client_token
                    )
                return super().checkpoint(
                    durable_execution_arn, checkpoint_token, updates, client_token
                )

        return Service(service)


class HeldCheckpoint:
    """A slow Lambda API: it holds the first checkpoint call that carries ``name``'s START.

    ``held`` is set once the SDK's checkpoint thread is in that call; the call reaches the
    runner's checkpoint service when the test sets ``release``.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.held = threading.Event()
        self.release = threading.Event()

    def around(self, service: DurableServiceClient) -> DurableServiceClient:
        hold = self

        class Service(Forwarding):
            def checkpoint(
                self,
                durable_execution_arn: str,
                checkpoint_token: str,
                updates: list[OperationUpdate],
                client_token: str | None,
            ) -> CheckpointOutput:
                hit = any(
                    u.name == hold.name and u.action is OperationAction.START for u in updates
                )
                if hit and not hold.held.is_set():
                    hold.held.set()
                    assert hold.release.wait(60)
                return super().checkpoint(
                    durable_execution_arn, checkpoint_token, updates, client_token
                )

        return Service(service)


class Shop:
    """``@durable_execution`` over ``@idempotent``: charge in a step, then a "receipt" step.

    In the first invocation of execution "A" only: ``before_receipt`` runs before the receipt
    step, ``after_receipt`` runs after it (also when it raised), and ``failure`` after it
    returned. A's later invocations wait at ``gate`` until the test opens it. ``first_ended``
    is set once A's first invocation has returned or raised to the runner, and ``raised`` holds
    what its body raised. ``checkpoints`` fails one checkpoint call of the service the runner
    hands the SDK. ``plugins`` go to ``@durable_execution`` (with
    ``DURABLE_EXECUTION_PLUGINS``, read when the shop is made).
    """

    def __init__(
        self,
        failure: Callable[[DurableContext], None] | None = None,
        *,
        receipt: StepConfig | None = None,
        checkpoints: FailingCheckpoint | HeldCheckpoint | None = None,
        before_receipt: Callable[[DurableContext], None] | None = None,
        after_receipt: Callable[[DurableContext], None] | None = None,
        plugins: list[Any] | None = None,
    ) -> None:
        self.charges = 0
        self.raised: list[BaseException] = []  # what A's first invocation's body raised
        self.body_raised = threading.Event()
        self.gate = threading.Event()
        self.first_ended = threading.Event()
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
            first = not self.first_ended.is_set()
            if first and before_receipt is not None:
                before_receipt(context)
            try:
                receipt_ = context.step(lambda _: "sent", name="receipt", config=receipt)
            finally:
                if first and after_receipt is not None:
                    after_receipt(context)
            if first and failure is not None:
                failure(context)
            return {"order": event["order_id"], "charge": charged, "receipt": receipt_}

        @durable_execution(plugins=plugins)
        def handler(event: dict[str, Any], context: DurableContext) -> Any:
            arn = context.execution_context.durable_execution_arn
            invocations[arn] = invocations.get(arn, 0) + 1
            if invocations[arn] > 1 and not self.gate.is_set():
                assert self.gate.wait(60)  # A's retry waits for B
            try:
                return body(event, context)
            except BaseException as exc:
                if not self.first_ended.is_set():
                    self.raised.append(exc)
                    self.body_raised.set()
                raise

        def runtime(event: Any, context: Any) -> Any:
            first = not self.first_ended.is_set()
            if checkpoints is not None and isinstance(
                event, DurableExecutionInvocationInputWithClient
            ):
                service = checkpoints.around(event.service_client)
                event = dataclasses.replace(event, service_client=service)
            try:
                return handler(event, context)
            except Crash as exc:  # the Lambda runtime reports it as the invocation's error
                raise RuntimeError("the runtime stopped the invocation") from exc
            finally:
                if first:
                    self.first_ended.set()

        self.handler = runtime


@pytest.fixture
def runner_for() -> Iterator[Callable[..., Any]]:
    runners: list[Any] = []
    shops: list[Shop] = []

    def make(shop: Shop, **options: Any) -> Any:
        runner = DurableFunctionTestRunner(handler=shop.handler, **options)
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
    """Run A's first invocation to its end, B to its end, then A to its end."""
    arn = runner.run_async(input=ORDER, execution_name="A", execution_timeout=120)
    assert shop.first_ended.wait(60)
    second = runner.run(input=ORDER, execution_name="B", execution_timeout=60)
    shop.gate.set()
    first = runner.wait_for_result(arn, timeout=60)
    return first, second


def _flaky_serdes(plugins: list[Any] | None) -> Shop:
    return Shop(receipt=StepConfig(serdes=FlakySerDes()), plugins=plugins)


def _throttled_checkpoint(plugins: list[Any] | None) -> Shop:
    # The receipt's SUCCEED is a synchronous checkpoint: the step waits for it, and the checkpoint
    # thread wakes it with the error. A CheckpointError never reaches the handler's body bare:
    # the SDK wraps every checkpoint failure in BackgroundThreadError there, and its
    # `durable_execution` unwraps it and re-raises the retryable CheckpointError to Lambda.
    return Shop(
        checkpoints=FailingCheckpoint(OperationAction.SUCCEED, "ThrottlingException", 429),
        plugins=plugins,
    )


def _broken_checkpoint_thread(plugins: list[Any] | None) -> Shop:
    # The receipt's START is a fire-and-forget checkpoint (at least once per retry): the step's
    # function runs while the checkpoint thread fails on it, and the body learns of the failure
    # from the stored BackgroundThreadError at its next checkpoint (or, when START and SUCCEED
    # went in one batch, from its wait for SUCCEED).
    return Shop(
        checkpoints=FailingCheckpoint(OperationAction.START, "ServiceException", 500),
        plugins=plugins,
    )


def _failed_checkpoint(status: int) -> Callable[[BaseException], bool]:
    def check(error: BaseException) -> bool:
        source = getattr(error, "source_exception", None)
        return (
            isinstance(error, BackgroundThreadError)
            and isinstance(source, CheckpointError)
            and source.is_retryable()
            and source.response_metadata is not None
            and status == source.response_metadata["HTTPStatusCode"]
        )

    return check


#: Each case: the shop (given the plugins), and what A's body must have raised (the SDK's own
#: error, not ours).
RETRIED: dict[str, tuple[Callable[[Any], Shop], Callable[[BaseException], bool]]] = {
    "retryable serdes error": (
        _flaky_serdes,
        lambda error: isinstance(error, RetryableSerDesError),
    ),
    "retryable checkpoint error": (_throttled_checkpoint, _failed_checkpoint(429)),
    "background checkpoint thread": (_broken_checkpoint_thread, _failed_checkpoint(500)),
    "unknown BaseException": (
        lambda plugins: Shop(_raise(Crash()), plugins=plugins),
        lambda error: isinstance(error, Crash),
    ),
}


@PLUGINS
@pytest.mark.parametrize("case", list(RETRIED.values()), ids=list(RETRIED))
def test_an_error_the_sdk_retries_keeps_the_claim(
    runner_for: Callable[..., Any],
    case: tuple[Callable[[Any], Shop], Callable[[BaseException], bool]],
    plugins: list[Any] | None,
) -> None:
    """B, started between A's failed invocation and A's retry, is refused; one charge."""
    shop_for, raised_as_expected = case
    shop = shop_for(plugins)
    runner = runner_for(shop)

    first, second = run_a_then_b(runner, shop)

    assert 1 == len(shop.raised)
    assert raised_as_expected(shop.raised[0])
    assert "FAILED" == status(second)
    assert "IdempotencyAlreadyInProgressError" in json.dumps(second.error.to_dict())
    assert "SUCCEEDED" == status(first)
    assert 1 == shop.charges


class PauseSignallingStore(InMemoryExecutionStore):
    """The runner's execution store, which tells when the runner saved an execution paused."""

    def __init__(self) -> None:
        super().__init__()
        self.paused = threading.Event()

    def save(self, execution: Execution) -> None:
        super().save(execution)
        if execution.is_paused:
            self.paused.set()


@PLUGINS
def test_an_error_after_the_runner_revoked_the_token_keeps_the_claim(
    runner_for: Callable[..., Any], plugins: list[Any] | None
) -> None:
    """The runner pauses A mid-invocation; A's body then fails in a cleanup: B is refused.

    The pause is applied (saved) before A's receipt step checkpoints, so the runner answers that
    checkpoint without a token and the SDK revokes the invocation's token; the step ends in
    SuspendExecution and a cleanup that fails while it unwinds raises a ValueError, which the SDK
    answers with PENDING. A stays paused (no invocation) until the test resumes it after B.
    """
    paused_store = PauseSignallingStore()
    at_receipt, go = threading.Event(), threading.Event()
    revoked: list[bool] = []

    def hold(_: DurableContext) -> None:
        at_receipt.set()
        assert go.wait(60)

    def failing_cleanup(context: DurableContext) -> None:
        revoked.append(context.state.is_checkpoint_token_revoked)
        raise ValueError("the audit log was closed")

    shop = Shop(before_receipt=hold, after_receipt=failing_cleanup, plugins=plugins)
    shop.gate.set()
    runner = runner_for(shop, store=paused_store)
    arn = runner.run_async(input=ORDER, execution_name="A", execution_timeout=120)
    assert at_receipt.wait(60)
    pause_errors: list[BaseException] = []

    def pause() -> None:
        try:
            runner.pause_execution(arn, timeout=60)  # returns once no invocation of A runs
        except BaseException as exc:  # reported below
            pause_errors.append(exc)

    pausing = threading.Thread(target=pause)
    pausing.start()
    assert paused_store.paused.wait(60)
    go.set()
    pausing.join(60)
    assert not pausing.is_alive()
    assert not pause_errors
    assert shop.first_ended.is_set()
    assert [True] == revoked  # the SDK's own flag, set by the runner's tokenless answer
    assert 1 == len(shop.raised)
    assert isinstance(shop.raised[0], ValueError)
    assert isinstance(shop.raised[0].__context__, SuspendExecution)

    second = runner.run(input=ORDER, execution_name="B", execution_timeout=60)
    runner.resume_execution(arn)
    first = runner.wait_for_result(arn, timeout=60)

    assert "FAILED" == status(second)
    assert "IdempotencyAlreadyInProgressError" in json.dumps(second.error.to_dict())
    assert "SUCCEEDED" == status(first)
    assert 1 == shop.charges


def revocation_found_after_the_body_raised(
    runner_for: Callable[..., Any], plugins: list[Any] | None
) -> None:
    """A's body raises ExecutionError while a fire-and-forget checkpoint is still in flight.

    The runner pauses A before answering that checkpoint, so its answer carries no token: the
    SDK revokes the token while it ends the invocation, and turns its FAILED answer into PENDING
    (execution.py, the check after the ExitStack). A goes on, so its claim must stay.
    """
    paused_store = PauseSignallingStore()
    slow = HeldCheckpoint("audit")

    def fail_in_audit(context: DurableContext) -> None:
        def audit(_: DurableContext) -> None:
            assert slow.held.wait(60)  # the child's START is in the service's hands
            raise ExecutionError("the order was withdrawn")

        context.run_in_child_context(audit, name="audit")

    shop = Shop(fail_in_audit, checkpoints=slow, plugins=plugins)
    shop.gate.set()
    runner = runner_for(shop, store=paused_store)
    arn = runner.run_async(input=ORDER, execution_name="A", execution_timeout=120)
    assert shop.body_raised.wait(60)
    pausing = threading.Thread(target=runner.pause_execution, args=(arn, 60))
    pausing.start()
    assert paused_store.paused.wait(60)
    slow.release.set()
    pausing.join(60)
    assert not pausing.is_alive()
    assert shop.first_ended.is_set()

    second = runner.run(input=ORDER, execution_name="B", execution_timeout=60)
    runner.resume_execution(arn)
    first = runner.wait_for_result(arn, timeout=60)

    assert "SUCCEEDED" == status(first)  # A was not failed: the SDK answered PENDING
    assert "FAILED" == status(second)
    assert 1 == shop.charges


@pytest.mark.parametrize(
    ("plugins", "named"),
    [([ClaimsPlugin()], False), ([ClaimsPlugin], False), (None, True), ([ClaimsPlugin()], True)],
    ids=["instance", "class", "entry point", "instance and entry point"],
)
def test_with_the_claims_plugin_a_revocation_found_after_the_body_raised_keeps_the_claim(
    runner_for: Callable[..., Any],
    plugins: list[Any] | None,
    named: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ClaimsPlugin holds the release until the SDK's final answer, PENDING here: B is refused.

    Registered in ``plugins=[...]``, through its entry point named in
    ``DURABLE_EXECUTION_PLUGINS``, or both at once (two plugins serve each invocation).
    """
    if named:
        monkeypatch.setenv("DURABLE_EXECUTION_PLUGINS", "idempotent_lambda.claims")
    revocation_found_after_the_body_raised(runner_for, plugins)


@pytest.mark.xfail(
    strict=True,
    reason="without ClaimsPlugin (DESIGN §13), a claim whose body raised an execution-ending "
    "error is released at once; the SDK learns of the revocation later and answers PENDING",
)
def test_without_the_plugin_a_revocation_found_after_the_body_raised_releases_the_claim(
    runner_for: Callable[..., Any],
) -> None:
    """The §13 behaviour, kept without the plugin: B runs while A goes on (two charges)."""
    revocation_found_after_the_body_raised(runner_for, None)


ENDED = {
    "handler error": _raise(ValueError("card declined")),
    "execution error": _raise(ExecutionError("bad input")),
    "non-retryable checkpoint error": _raise(
        CheckpointError("denied", error_category=DurableApiErrorCategory.EXECUTION)
    ),
}


@PLUGINS
@pytest.mark.parametrize("failure", list(ENDED.values()), ids=list(ENDED))
def test_an_error_that_ends_the_execution_releases_the_claim(
    runner_for: Callable[..., Any],
    failure: Callable[[DurableContext], None],
    plugins: list[Any] | None,
) -> None:
    """A fails for good: its claim is released, and B of the same order runs."""
    shop = Shop(failure, plugins=plugins)
    shop.gate.set()
    runner = runner_for(shop)

    first = runner.run(input=ORDER, execution_name="A", execution_timeout=60)
    second = runner.run(input=ORDER, execution_name="B", execution_timeout=60)

    assert "FAILED" == status(first)
    assert "SUCCEEDED" == status(second)
    assert 2 == shop.charges


class Stock:
    """``@durable_execution`` around a handler that reserves stock under ``@idempotent``.

    ``reserve`` claims with the execution's own owner (it is given the ``DurableContext``), and
    fails the first ``failures`` times it runs; the handler tries ``tries`` times and answers
    "back-ordered" when every try failed.
    """

    def __init__(self, plugins: list[Any] | None, *, failures: int, tries: int) -> None:
        self.attempts = 0
        self.outcomes: list[Outcome] = []
        store = InMemoryPersistenceLayer()
        config = IdempotencyConfig(
            event_key_jmespath="order_id", decision_hook=lambda d: self.outcomes.append(d.outcome)
        )

        @idempotent(persistence_store=store, config=config)
        def reserve(event: dict[str, Any], context: DurableContext) -> str:
            self.attempts += 1
            if self.attempts <= failures:
                raise ValueError("out of stock")
            return "reserved"

        @durable_execution(plugins=plugins)
        def handler(event: dict[str, Any], context: DurableContext) -> str:
            for _ in range(tries):
                try:
                    return reserve(event, context)
                except ValueError:
                    pass
            return "back-ordered"

        self.handler = handler

    def run(self, *names: str) -> list[Any]:
        with DurableFunctionTestRunner(handler=self.handler) as runner:
            return [
                runner.run(input=ORDER, execution_name=name, execution_timeout=60) for name in names
            ]


@PLUGINS
def test_an_error_the_handler_caught_releases_the_claim_when_the_execution_succeeds(
    plugins: list[Any] | None,
) -> None:
    """A's reservation failed and A succeeded anyway: its claim goes, and B reserves."""
    stock = Stock(plugins, failures=1, tries=1)

    first, second = stock.run("A", "B")

    assert ["SUCCEEDED", "SUCCEEDED"] == [status(first), status(second)]
    assert ['"back-ordered"', '"reserved"'] == [first.result, second.result]
    assert 2 == stock.attempts


@PLUGINS
def test_a_claim_taken_up_again_in_the_invocation_stays_completed(
    plugins: list[Any] | None,
) -> None:
    """A tries again after a failure and reserves: the record stays, B replays it, and the held
    release reports no lost lease."""
    stock = Stock(plugins, failures=1, tries=2)

    first, second = stock.run("A", "B")

    assert ["SUCCEEDED", "SUCCEEDED"] == [status(first), status(second)]
    assert ['"reserved"', '"reserved"'] == [first.result, second.result]
    assert 2 == stock.attempts
    assert Outcome.REPLAYED in stock.outcomes
    assert Outcome.LEASE_LOST not in stock.outcomes
