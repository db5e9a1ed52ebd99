"""OpenTelemetry on durable steps: the SDK's own runner, one span per run of a step."""

from __future__ import annotations

import json
from typing import Any

import pytest

from idempotent_lambda import InMemoryPersistenceLayer, durable
from tests._otel import Traces, is_child
from tests.unit.test_durable_steps import SUCCEEDED, run, status

sdk = pytest.importorskip("aws_durable_execution_sdk_python")
from aws_durable_execution_sdk_python import DurableContext, durable_execution  # noqa: E402
from aws_durable_execution_sdk_python.config import StepConfig  # noqa: E402
from aws_durable_execution_sdk_python.retries import (  # noqa: E402
    RetryStrategyConfig,
    create_retry_strategy,
)
from opentelemetry.trace import StatusCode  # noqa: E402


def test_a_step_retried_by_the_sdk_is_a_failed_span_then_a_claimed_one(traces: Traces) -> None:
    """The attempt that raised fails its span (released); the retry claims; both name the
    execution and the step's key, never the step's input or result."""
    store = InMemoryPersistenceLayer()
    attempts: list[int] = []
    retry = StepConfig(retry_strategy=create_retry_strategy(RetryStrategyConfig(max_attempts=3)))

    @durable_execution
    def handler(event: dict[str, Any], context: DurableContext) -> str:
        def charge(_: Any) -> str:
            attempts.append(1)
            if len(attempts) == 1:
                raise RuntimeError("partner API answered 503 for card-4111")
            return "receipt-secret"

        with traces.tracer.start_as_current_span("invocation"):
            return durable.step(
                context,
                charge,
                name="charge",
                persistence_store=store,
                step_config=retry,
                payload={"card": event["card"]},
            )

    result = run(handler, {"card": "card-4111"})

    assert SUCCEEDED == status(result)
    assert "receipt-secret" == json.loads(result.result)
    failed, claimed = traces.ours()
    assert "idempotency durable step charge" == claimed.name
    assert ("RELEASED", StatusCode.ERROR) == (
        failed.attributes["idempotency.outcome"],
        failed.status.status_code,
    )
    assert "RuntimeError" == failed.attributes["error.type"]
    assert ("CLAIMED", StatusCode.UNSET) == (
        claimed.attributes["idempotency.outcome"],
        claimed.status.status_code,
    )
    assert failed.attributes["idempotency.key"] == claimed.attributes["idempotency.key"]
    invocations = [s for s in traces.spans() if s.name == "invocation"]
    assert [True, True] == [any(is_child(s, i) for i in invocations) for s in (failed, claimed)]
    arn = claimed.attributes["idempotency.durable_execution_arn"]
    assert arn == failed.attributes["idempotency.durable_execution_arn"]
    assert arn
    values = [str(v) for v in traces.every_value(traces.ours())]
    assert not [v for v in values if "4111" in v or "receipt-secret" in v]


def test_a_suspended_durable_handler_is_not_an_error_and_its_replay_completes(
    traces: Traces,
) -> None:
    """``@idempotent`` under ``@durable_execution``: the invocation that suspends ends its span
    as SUSPENDED with no error; the replay's span completes the claim under the same key."""
    from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestRunner

    from idempotent_lambda import IdempotencyConfig, idempotent

    store = InMemoryPersistenceLayer()

    @idempotent(persistence_store=store, config=IdempotencyConfig(event_key_jmespath="order_id"))
    def body(event: dict[str, Any], context: DurableContext) -> str:
        context.create_callback(name="approval").result()  # suspends until approved
        return "approved"

    @durable_execution
    def handler(event: dict[str, Any], context: DurableContext) -> str:
        return body(event, context)

    with DurableFunctionTestRunner(handler=handler) as runner:
        arn = runner.run_async(
            input='{"order_id": "o-1"}', execution_name="e", execution_timeout=60
        )
        callback = runner.wait_for_callback(arn, name="approval", timeout=60)
        runner.send_callback_success(callback, result=b'"ok"')
        result = runner.wait_for_result(arn, timeout=60)

    assert SUCCEEDED == status(result)
    suspended, completed = traces.ours()
    assert ("SUSPENDED", StatusCode.UNSET) == (
        suspended.attributes["idempotency.outcome"],
        suspended.status.status_code,
    )
    assert "error.type" not in suspended.attributes
    assert "CLAIMED" == completed.attributes["idempotency.outcome"]
    assert suspended.attributes["idempotency.key"] == completed.attributes["idempotency.key"]
