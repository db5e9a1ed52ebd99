"""The outbox in the example app: the table's stream and index, the publisher's mapping and grants,
the sweeper's schedule and grants, the bus and its policy, the rule, the consumer's queue, and
the alarm; and the construct's refusals."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_events as events

from idempotent_lambda_cdk import IdempotencyTable

from .conftest import Synthesized, python_function
from .test_idempotency_table import granted_to

STACK = "IdempotentOrders"
#: The outbox functions' condition: CreateOrder's outbox items, <record key>#outbox#<slot>, and
#: <key prefix>#outbox#<slot> (a body run without a record).
OUTBOX_KEYS = {
    "ForAllValues:StringLike": {
        "dynamodb:LeadingKeys": ["orders.create_order#*#outbox#*", "orders.create_order#outbox#*"]
    }
}
#: Their PutEvents condition: the source CreateOrder emits, nothing else.
ORDERS_SOURCE = {"StringEquals": {"events:source": ["orders"]}}


def of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {
        name: resource["Properties"]
        for name, resource in template["Resources"].items()
        if resource["Type"] == kind
    }


def logical_id(template: dict[str, Any], kind: str, prefix: str) -> str:
    (name,) = [name for name in of_type(template, kind) if name.startswith(prefix)]
    return name


def test_the_idempotency_table_streams_new_images(synthesized: Synthesized) -> None:
    """outbox=True: the table gets the stream the publisher reads."""
    template = synthesized.templates[STACK]
    table = of_type(template, "AWS::DynamoDB::Table")[
        logical_id(template, "AWS::DynamoDB::Table", "IdempotencyTable")
    ]
    assert {"StreamViewType": "NEW_IMAGE"} == table["StreamSpecification"]


def test_the_publisher_runs_on_outbox_inserts_bounded_and_in_order(
    synthesized: Synthesized,
) -> None:
    """The mapping: the table's stream, INSERTs of CreateOrder's outbox items only (the ones the
    publisher may read), per-record failures, split batches, bounded retries to the failure
    queue, one batch per shard."""
    template = synthesized.templates[STACK]
    table = logical_id(template, "AWS::DynamoDB::Table", "IdempotencyTable")
    (mapping,) = [
        m
        for m in of_type(template, "AWS::Lambda::EventSourceMapping").values()
        if m["EventSourceArn"] == {"Fn::GetAtt": [table, "StreamArn"]}
    ]
    (pattern,) = [json.loads(f["Pattern"]) for f in mapping["FilterCriteria"]["Filters"]]
    assert {
        "eventName": ["INSERT"],
        "dynamodb": {
            "Keys": {"id": {"S": [{"prefix": "orders.create_order#"}]}},
            "NewImage": {"outbox_id": {"S": [{"exists": True}]}},
        },
    } == pattern
    assert {"Ref": logical_id(template, "AWS::Lambda::Function", "PublishEvents")} == mapping[
        "FunctionName"
    ]
    assert ["ReportBatchItemFailures"] == mapping["FunctionResponseTypes"]
    assert (True, 1, 10, 21600) == (
        mapping["BisectBatchOnFunctionError"],
        mapping["ParallelizationFactor"],
        mapping["MaximumRetryAttempts"],
        mapping["MaximumRecordAgeInSeconds"],
    )
    failures = logical_id(template, "AWS::SQS::Queue", "OutboxPublishFailures")
    assert {"Fn::GetAtt": [failures, "Arn"]} == mapping["DestinationConfig"]["OnFailure"][
        "Destination"
    ]


def test_the_publisher_gets_only_what_it_calls(synthesized: Synthesized) -> None:
    """PutEvents on the bus for its source; BatchGetItem and UpdateItem on outbox keys; the
    stream's reads (no ListStreams on *); the failure queue. No record action, no wildcard
    resource."""
    template = synthesized.templates[STACK]
    table = logical_id(template, "AWS::DynamoDB::Table", "IdempotencyTable")
    bus = logical_id(template, "AWS::Events::EventBus", "OrderEvents")
    granted = {
        json.dumps(s["Action"]): (s["Resource"], s.get("Condition"))
        for s in granted_to(template, "PublishEvents")
    }
    assert (
        {"Fn::GetAtt": [table, "Arn"]},
        OUTBOX_KEYS,
    ) == granted[json.dumps(["dynamodb:BatchGetItem", "dynamodb:UpdateItem"])]
    assert ({"Fn::GetAtt": [bus, "Arn"]}, ORDERS_SOURCE) == granted[json.dumps("events:PutEvents")]
    stream_read = ["dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"]
    assert ({"Fn::GetAtt": [table, "StreamArn"]}, None) == granted[json.dumps(stream_read)]
    assert "*" not in [s["Resource"] for s in granted_to(template, "PublishEvents")]
    actions = {a for s in granted_to(template, "PublishEvents") for a in _list(s["Action"])}
    assert not actions & {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem"}


def test_only_the_publisher_is_granted_outbox_items_apart(synthesized: Synthesized) -> None:
    """The emitter's record grant covers its events; no other function names outbox keys."""
    template = synthesized.templates[STACK]
    assert any(s.get("Condition") == OUTBOX_KEYS for s in granted_to(template, "SweepOutbox"))
    for function in ("CreateOrder", "ProcessPayment", "ReserveStock"):
        assert all(s.get("Condition") != OUTBOX_KEYS for s in granted_to(template, function))


def test_the_rule_feeds_the_consumer_s_queue_on_its_behalf_only(
    synthesized: Synthesized,
) -> None:
    """OrderCreated of source orders goes to the queue, with a dead-letter queue; the queue
    policy lets EventBridge send for that rule only; ReserveStock reads the queue."""
    template = synthesized.templates[STACK]
    rule_id = logical_id(template, "AWS::Events::Rule", "OrderCreated")
    rule = of_type(template, "AWS::Events::Rule")[rule_id]
    assert {"source": ["orders"], "detail-type": ["OrderCreated"]} == rule["EventPattern"]
    queue = logical_id(template, "AWS::SQS::Queue", "OrderEventsQueue")
    (target,) = rule["Targets"]
    assert {"Fn::GetAtt": [queue, "Arn"]} == target["Arn"]
    assert "DeadLetterConfig" in target
    sends = [
        s
        for policy in of_type(template, "AWS::SQS::QueuePolicy").values()
        for s in policy["PolicyDocument"]["Statement"]
        if s["Principal"] == {"Service": "events.amazonaws.com"}
    ]
    assert sends
    for statement in sends:
        assert {"ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": [rule_id, "Arn"]}}} == statement[
            "Condition"
        ]
    (mapping,) = [
        m
        for m in of_type(template, "AWS::Lambda::EventSourceMapping").values()
        if m["EventSourceArn"] == {"Fn::GetAtt": [queue, "Arn"]}
    ]
    assert ["ReportBatchItemFailures"] == mapping["FunctionResponseTypes"]
    assert {"Ref": logical_id(template, "AWS::Lambda::Function", "ReserveStock")} == mapping[
        "FunctionName"
    ]


def test_unpublished_events_are_alarmed(synthesized: Synthesized) -> None:
    """The publisher's age of the oldest unpublished event, in the functions' namespace."""
    alarms = of_type(synthesized.templates[STACK], "AWS::CloudWatch::Alarm").values()
    (alarm,) = [a for a in alarms if a.get("MetricName") == "OutboxOldestUnpublishedAge"]
    assert ("IdempotentOrders", "Maximum", 300) == (
        alarm["Namespace"],
        alarm["Statistic"],
        alarm["Threshold"],
    )
    assert [{"Name": "service", "Value": "orders"}] == alarm["Dimensions"]


def test_the_table_has_the_sweeper_s_sparse_index(synthesized: Synthesized) -> None:
    """outbox=True: the index of unpublished items, keys only; a table without outbox has none."""
    template = synthesized.templates[STACK]
    table = of_type(template, "AWS::DynamoDB::Table")[
        logical_id(template, "AWS::DynamoDB::Table", "IdempotencyTable")
    ]
    assert [
        {
            "IndexName": "outbox-unpublished",
            "KeySchema": [
                {"AttributeName": "outbox_pending", "KeyType": "HASH"},
                {"AttributeName": "outbox_emitted_at", "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "KEYS_ONLY"},
        }
    ] == table["GlobalSecondaryIndexes"]
    assert {"AttributeName": "outbox_pending", "AttributeType": "S"} in table[
        "AttributeDefinitions"
    ]
    for stack in ("WithBucket", "TableOnly"):
        (plain,) = of_type(synthesized.templates[stack], "AWS::DynamoDB::Table").values()
        assert "GlobalSecondaryIndexes" not in plain


def test_the_sweeper_queries_its_prefixes_of_the_index_on_a_schedule(
    synthesized: Synthesized,
) -> None:
    """Query on the index partitions of CreateOrder (<prefix>#<shard>), the outbox items, PutEvents
    of its source; nothing else. A rule runs it every 5 minutes, without retries."""
    template = synthesized.templates[STACK]
    table = logical_id(template, "AWS::DynamoDB::Table", "IdempotencyTable")
    bus = logical_id(template, "AWS::Events::EventBus", "OrderEvents")
    granted = granted_to(template, "SweepOutbox")
    by_action = {json.dumps(s["Action"]): (s["Resource"], s.get("Condition")) for s in granted}
    index = {"Fn::Join": ["", [{"Fn::GetAtt": [table, "Arn"]}, "/index/outbox-unpublished"]]}
    assert {
        json.dumps("dynamodb:Query"): (
            index,
            {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["orders.create_order#*"]}},
        ),
        json.dumps(["dynamodb:BatchGetItem", "dynamodb:UpdateItem"]): (
            {"Fn::GetAtt": [table, "Arn"]},
            OUTBOX_KEYS,
        ),
        json.dumps("events:PutEvents"): ({"Fn::GetAtt": [bus, "Arn"]}, ORDERS_SOURCE),
    } == by_action
    sweeper = logical_id(template, "AWS::Lambda::Function", "SweepOutbox")
    (rule,) = [
        r for r in of_type(template, "AWS::Events::Rule").values() if "ScheduleExpression" in r
    ]
    assert "rate(5 minutes)" == rule["ScheduleExpression"]
    (target,) = rule["Targets"]
    assert {"Fn::GetAtt": [sweeper, "Arn"]} == target["Arn"]
    assert 0 == target["RetryPolicy"]["MaximumRetryAttempts"]


def test_only_the_outbox_functions_may_put_the_source_on_the_bus(
    synthesized: Synthesized,
) -> None:
    """The bus's policy denies PutEvents of "orders" to every principal but the publisher's and
    the sweeper's roles; no other function may put events at all."""
    template = synthesized.templates[STACK]
    bus = logical_id(template, "AWS::Events::EventBus", "OrderEvents")
    (policy,) = of_type(template, "AWS::Events::EventBusPolicy").values()
    assert {"Ref": bus} == policy["EventBusName"]
    roles = [
        {"Fn::GetAtt": [logical_id(template, "AWS::IAM::Role", f"{name}ServiceRole"), "Arn"]}
        for name in ("PublishEvents", "SweepOutbox")
    ]
    assert {
        "Effect": "Deny",
        "Principal": "*",
        "Action": "events:PutEvents",
        "Resource": {"Fn::GetAtt": [bus, "Arn"]},
        "Condition": {
            "StringEquals": {"events:source": ["orders"]},
            "ArnNotEquals": {"aws:PrincipalArn": roles},
        },
    } == policy["Statement"]
    for function in ("CreateOrder", "ProcessPayment", "ReserveStock"):
        actions = {a for s in granted_to(template, function) for a in _list(s["Action"])}
        assert "events:PutEvents" not in actions, function


def test_a_sweeper_that_stops_running_is_alarmed(synthesized: Synthesized) -> None:
    """The example alarms when SweepOutbox was not invoked for 15 minutes, or sends no data."""
    template = synthesized.templates[STACK]
    sweeper = logical_id(template, "AWS::Lambda::Function", "SweepOutbox")
    alarms = of_type(template, "AWS::CloudWatch::Alarm").values()
    (alarm,) = [a for a in alarms if a.get("MetricName") == "Invocations"]
    assert [{"Name": "FunctionName", "Value": {"Ref": sweeper}}] == alarm["Dimensions"]
    assert (900, 1, "LessThanThreshold", "breaching") == (
        alarm["Period"],
        alarm["Threshold"],
        alarm["ComparisonOperator"],
        alarm["TreatMissingData"],
    )


def test_the_publisher_needs_the_table_s_stream_the_emitters_prefixes_and_sources() -> None:
    """Without outbox=True; with no key prefix, or one that would widen the grant; with no
    source, one EventBridge refuses, or one another publisher has on that bus: ValueError."""
    stack = cdk.Stack(cdk.App(), "NoOutbox")
    function = python_function(stack, "Publisher")
    bus = events.EventBus(stack, "Bus")
    plain = IdempotencyTable(stack, "Plain")
    with pytest.raises(ValueError, match="outbox=True"):
        plain.add_outbox_publisher(
            function, key_prefixes=["orders.create"], event_bus=bus, sources=["orders"]
        )
    table = IdempotencyTable(stack, "WithOutbox", outbox=True)
    for prefixes in ([], ["orders.*"], ["a#b"], "orders"):
        with pytest.raises(ValueError, match="key_prefixes"):
            table.add_outbox_publisher(
                function, key_prefixes=prefixes, event_bus=bus, sources=["orders"]
            )
    for sources in ([], ["aws.orders"], ["orders.*"], ["x" * 257], "orders"):
        with pytest.raises(ValueError, match="sources"):
            table.add_outbox_publisher(
                function, key_prefixes=["orders.create"], event_bus=bus, sources=sources
            )
    table.add_outbox_publisher(function, key_prefixes=["a"], event_bus=bus, sources=["orders"])
    other = python_function(stack, "Other")
    with pytest.raises(ValueError, match="publisher already"):
        table.add_outbox_publisher(other, key_prefixes=["b"], event_bus=bus, sources=["orders"])


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]
