import json

import pytest

pytest.importorskip("aws_durable_execution_sdk_python_testing")
from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestRunner

from idempotent_lambda.testing.durable import stop_after_step


@pytest.fixture
def idempotency_table_name():
    return "IdempotencyTable"  # the table the workflow's store names


@pytest.fixture
def workflow(idempotency_dynamodb_table, import_handler):
    # boto3 points at the local server now: import the module afresh, so its store uses it.
    return import_handler("order_workflow")


@pytest.fixture
def charges(workflow, monkeypatch):
    calls = []
    provider = workflow.charge_card

    def charge_card(order_id, amount, idempotency_key):
        calls.append(order_id)  # the side effect, recorded
        return provider(order_id, amount, idempotency_key)

    monkeypatch.setattr(workflow, "charge_card", charge_card)
    return calls


def test_a_stop_after_the_charge_does_not_charge_again(workflow, charges):
    order = json.dumps({"order_id": "o-1", "amount": 5})
    # The invocation stops once the charge's record is stored, before the SDK's checkpoint;
    # the runner ends it after 5 s and invokes the execution again, which replays the record.
    with (
        stop_after_step("charge") as stop,
        DurableFunctionTestRunner(handler=workflow.handler, invocation_timeout=5) as runner,
    ):
        result = runner.run(input=order, execution_timeout=120)
    assert stop.stopped == 1  # the stop did happen
    assert result.status.value == "SUCCEEDED"
    assert charges == ["o-1"]


def test_a_second_execution_returns_the_same_json(workflow, charges):
    order = json.dumps({"order_id": "o-2", "amount": 5})
    with DurableFunctionTestRunner(handler=workflow.handler) as runner:
        first = runner.run(input=order, execution_name="first", execution_timeout=60)
        again = runner.run(input=order, execution_name="again", execution_timeout=60)
    assert again.result == first.result  # the JSON text itself: the replay is the first run's
    assert charges == ["o-2"]
