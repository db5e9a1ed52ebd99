"""The runner of the Step Functions recipe: its state machines, checked with npm's tools.

Step Functions cannot run here, so the two definitions (JSONPath and JSONata) are validated by
`asl-validator`, and the payload each task state builds is evaluated on a sample context object
by `jsonpath-plus` and `jsonata` (tests/examples/_step_functions_payload.js), the engines
Step Functions' own syntaxes come from. ``make stepfunctions-tools`` installs them into
.cache/stepfunctions (``make test`` does it first). The test skips only when npm is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from idempotent_lambda import IdempotencyAlreadyInProgressError, IdempotencyKeyError
from idempotent_lambda.testing import FakeLambdaContext

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "examples/step_functions"
NODE_MODULES = ROOT / ".cache/stepfunctions/node_modules"
PAYLOAD_SCRIPT = Path(__file__).with_name("_step_functions_payload.js")
DEFINITIONS = ("jsonpath.asl.json", "jsonata.asl.json")


def node() -> str:
    """Return node, or skip when npm (which brings the tools) is missing; fail without them."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed, so the state machines cannot be checked")
    installed = all((NODE_MODULES / name).is_dir() for name in ("asl-validator", "jsonata"))
    executable = shutil.which("node")
    if not installed or executable is None:
        pytest.fail("asl-validator and jsonata are missing: run `make stepfunctions-tools`")
    return executable


def validate(definition: Path) -> subprocess.CompletedProcess[str]:
    validator = NODE_MODULES / "asl-validator/dist/bin/asl-validator.js"
    return subprocess.run(
        [node(), str(validator), "--json-path", str(definition)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def task_payload(definition: Path, state_input: Any, context: dict[str, Any]) -> Any:
    """Return the payload the ReserveStock state sends to Lambda for this input and context."""
    states = json.dumps({"input": state_input, "context": context})
    result = subprocess.run(
        [node(), str(PAYLOAD_SCRIPT), str(NODE_MODULES), str(definition), "ReserveStock", states],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert 0 == result.returncode, result.stderr
    return json.loads(result.stdout)


def context_object(execution: str, retry_count: int) -> dict[str, Any]:
    """The context object (``$$`` / ``$states.context``) of the ReserveStock state."""
    arn = f"arn:aws:states:us-east-1:123456789012:execution:Orders:{execution}"
    return {
        "Execution": {"Id": arn, "Name": execution, "StartTime": "2026-12-07T10:00:00.000Z"},
        "State": {
            "Name": "ReserveStock",
            "EnteredTime": "2026-12-07T10:00:00.120Z",
            "RetryCount": retry_count,
        },
        "StateMachine": {"Id": "arn:aws:states:us-east-1:123456789012:stateMachine:Orders"},
    }


def run_reserve_stock(module: ModuleType, tmp_path: Path) -> None:
    """Valid definitions; one payload in both syntaxes; a retry replays, a new execution runs."""
    for name in DEFINITIONS:
        result = validate(RECIPE / name)
        assert 0 == result.returncode, result.stdout + result.stderr
    broken = json.loads((RECIPE / "jsonata.asl.json").read_text(encoding="utf-8"))
    broken["States"]["ReserveStock"]["Arguments"]["Payload"]["state_name"] = "{% $states. %}"
    (tmp_path / "broken.asl.json").write_text(json.dumps(broken), encoding="utf-8")
    assert 0 != validate(tmp_path / "broken.asl.json").returncode  # the check can fail

    order = {"order_id": str(uuid.uuid4()), "items": [{"sku": "A-1", "quantity": 2}]}
    execution, other = str(uuid.uuid4()), str(uuid.uuid4())
    contexts = {
        "first": context_object(execution, retry_count=0),
        "retry": context_object(execution, retry_count=1),
        "new execution": context_object(other, retry_count=0),
    }
    payloads = {
        (name, attempt): task_payload(RECIPE / name, order, context)
        for name in DEFINITIONS
        for attempt, context in contexts.items()
    }
    for attempt, context in contexts.items():
        expected = {
            "input": order,
            "execution_id": context["Execution"]["Id"],
            "state_name": "ReserveStock",
        }
        assert [expected, expected] == [payloads[name, attempt] for name in DEFINITIONS]

    # Both syntaxes send the same payloads, so the function sees the same three deliveries.
    # The first one meets an overlapping retry (the state timed out while it ran): the retry
    # fails with the error that the definitions' second retrier retries after a pause.
    reserved: list[str] = []
    overlapping: list[str] = []

    def reserve(order_id: str, items: list[Any]) -> str:
        if not reserved:
            with pytest.raises(IdempotencyAlreadyInProgressError) as raised:
                module.handler(payloads["jsonpath.asl.json", "retry"], FakeLambdaContext())
            overlapping.append(raised.type.__name__)  # the errorType Lambda reports
        reserved.append(order_id)
        return f"res-{len(reserved)}"

    module.reserve = reserve
    first = module.handler(payloads["jsonata.asl.json", "first"], FakeLambdaContext())
    assert first == module.handler(payloads["jsonpath.asl.json", "retry"], FakeLambdaContext())
    assert first != module.handler(payloads["jsonata.asl.json", "new execution"], None)
    assert [order["order_id"]] * 2 == reserved
    for name in DEFINITIONS:
        definition = json.loads((RECIPE / name).read_text(encoding="utf-8"))
        retried = [r["ErrorEquals"] for r in definition["States"]["ReserveStock"]["Retry"]]
        assert [overlapping[0]] in retried

    with pytest.raises(IdempotencyKeyError):  # a task that passes the state's input alone
        module.handler(order, FakeLambdaContext())
    assert 2 == len(reserved)
