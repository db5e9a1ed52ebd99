"""template.yaml's outbox sweeper, read as data: the sparse index it reads, its grants (a Query
of its own prefixes' index partitions), its schedule, and the prefixes the outbox functions
serve.

How it behaves on moto's real services: tests/functional/test_sample_outbox.py.
"""

from __future__ import annotations

import ast
from typing import Any

import pytest

from idempotent_lambda import outbox
from idempotent_lambda._outbox_format import EMITTED_AT, PENDING
from samples.app.orders import OUTBOX_KEY_PREFIXES
from samples.local_stack import load_template
from tests.functional.test_template import IDEMPOTENCY_TABLE_ARN, PUBLISHER, SWEEPER, as_list
from tests.functional.test_template_outbox import (
    ROOT,
    by_sid,
    function,
    leading_keys,
    resources,
)


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template(ROOT / "template.yaml")


def test_the_table_has_the_sweeper_s_sparse_index(template: dict[str, Any]) -> None:
    """`outbox-unpublished`: the pending mark (S) and the emission time (N), keys only, so it
    holds only unpublished items and costs one small index write each way."""
    table = resources(template, "AWS::DynamoDB::Table")["IdempotencyTable"]
    (index,) = table["GlobalSecondaryIndexes"]
    assert {
        "IndexName": outbox.OUTBOX_INDEX,
        "KeySchema": [
            {"AttributeName": PENDING, "KeyType": "HASH"},
            {"AttributeName": EMITTED_AT, "KeyType": "RANGE"},
        ],
        "Projection": {"ProjectionType": "KEYS_ONLY"},
    } == index
    assert [
        {"AttributeName": "id", "AttributeType": "S"},
        {"AttributeName": PENDING, "AttributeType": "S"},
        {"AttributeName": EMITTED_AT, "AttributeType": "N"},
    ] == table["AttributeDefinitions"]


def test_the_sweeper_queries_its_prefixes_of_the_index_and_nothing_else(
    template: dict[str, Any],
) -> None:
    """Query on the index only (no Scan, nothing on the table but the publisher's two actions),
    on the index partitions of the served prefixes (`<prefix>#<shard>`)."""
    sweeper = function(template, SWEEPER)
    grants = {
        sid: (sorted(as_list(s["Action"])), s["Resource"]) for sid, s in by_sid(sweeper).items()
    }
    assert {
        "FindUnpublishedOutboxItems": (
            ["dynamodb:Query"],
            {"Fn::Sub": "${IdempotencyTable.Arn}/index/" + outbox.OUTBOX_INDEX},
        ),
        "MarkOutboxEventsPublished": (
            ["dynamodb:BatchGetItem", "dynamodb:UpdateItem"],
            IDEMPOTENCY_TABLE_ARN,
        ),
        "PublishOrderEvents": (["events:PutEvents"], {"Fn::GetAtt": ["OrderEventsBus", "Arn"]}),
    } == grants
    query = by_sid(sweeper)["FindUnpublishedOutboxItems"]
    assert [f"{p}#*" for p in OUTBOX_KEY_PREFIXES] == leading_keys(query)
    publisher = by_sid(function(template, PUBLISHER))["MarkOutboxEventsPublished"]
    assert leading_keys(publisher) == leading_keys(by_sid(sweeper)["MarkOutboxEventsPublished"])


def test_the_sweeper_runs_every_five_minutes_through_its_alias(template: dict[str, Any]) -> None:
    """A Scheduler schedule invokes the alias (the canary shifts it), not retried; its role may
    invoke that alias only; the function has a minute and runs one at a time."""
    (schedule,) = resources(template, "AWS::Scheduler::Schedule").values()
    assert "rate(5 minutes)" == schedule["ScheduleExpression"]
    target = schedule["Target"]
    assert {"Ref": f"{SWEEPER}.Alias"} == target["Arn"]
    assert 0 == target["RetryPolicy"]["MaximumRetryAttempts"]
    role = template["Resources"][target["RoleArn"]["Fn::GetAtt"][0]]["Properties"]
    (policy,) = role["Policies"]
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert ("lambda:InvokeFunction", {"Ref": f"{SWEEPER}.Alias"}) == (
        statement["Action"],
        statement["Resource"],
    )
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert {"Service": "scheduler.amazonaws.com"} == trust["Principal"]
    sweeper = function(template, SWEEPER)
    assert (60, 1) == (sweeper["Timeout"], sweeper["ReservedConcurrentExecutions"])


@pytest.mark.parametrize(
    ("name", "factory"),
    [(PUBLISHER, "outbox.publish_handler("), (SWEEPER, "outbox.sweep_handler(")],
)
def test_the_outbox_functions_serve_the_emitters_prefixes(
    template: dict[str, Any], name: str, factory: str
) -> None:
    """The handler each runs is built with `key_prefixes=OUTBOX_KEY_PREFIXES`, the prefixes the
    template's grants and filter name."""
    module = function(template, name)["Handler"].removeprefix("app.").removesuffix(".handler")
    tree = ast.parse((ROOT / f"samples/app/{module}.py").read_text(encoding="utf-8"))
    (call,) = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node).startswith(factory)
    ]
    assert ["OUTBOX_KEY_PREFIXES"] == [
        ast.unparse(k.value) for k in call.keywords if k.arg == "key_prefixes"
    ]


def test_a_sweeper_that_stops_running_is_alarmed(template: dict[str, Any]) -> None:
    """No invocation of SweepOutbox in 15 minutes (three runs missed), or no data at all."""
    alarm = resources(template, "AWS::CloudWatch::Alarm")["SweepOutboxNotRunningAlarm"]
    assert ("AWS/Lambda", "Invocations", "Sum") == (
        alarm["Namespace"],
        alarm["MetricName"],
        alarm["Statistic"],
    )
    assert [{"Name": "FunctionName", "Value": {"Ref": SWEEPER}}] == alarm["Dimensions"]
    assert (900, 1, 1, "LessThanThreshold", "breaching") == (
        alarm["Period"],
        alarm["EvaluationPeriods"],
        alarm["Threshold"],
        alarm["ComparisonOperator"],
        alarm["TreatMissingData"],
    )
    (schedule,) = resources(template, "AWS::Scheduler::Schedule").values()
    assert "rate(5 minutes)" == schedule["ScheduleExpression"]  # 3 runs in a period
