"""The outbox in the example app: the table's stream, the publisher's mapping and grants, the bus,
the rule, the consumer's queue, and the alarm; and the construct's refusals."""

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
#: The publisher's condition: CreateOrder's outbox items, <record key>#outbox#<event id>.
OUTBOX_KEYS = {
    "ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["orders.create_order#*#outbox#*"]}
}


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
    """The mapping: the table's stream, outbox INSERTs only, per-record failures, split batches,
    bounded retries to the failure queue, one batch per shard."""
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
        "dynamodb": {"NewImage": {"outbox_id": {"S": [{"exists": True}]}}},
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
    """PutEvents on the bus; BatchGetItem and UpdateItem on outbox keys; the stream's reads (no
    ListStreams on *); the failure queue. No record action, no wildcard resource."""
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
    assert ({"Fn::GetAtt": [bus, "Arn"]}, None) == granted[json.dumps("events:PutEvents")]
    stream_read = ["dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"]
    assert ({"Fn::GetAtt": [table, "StreamArn"]}, None) == granted[json.dumps(stream_read)]
    assert "*" not in [s["Resource"] for s in granted_to(template, "PublishEvents")]
    actions = {a for s in granted_to(template, "PublishEvents") for a in _list(s["Action"])}
    assert not actions & {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem"}


def test_only_the_publisher_is_granted_outbox_items_apart(synthesized: Synthesized) -> None:
    """The emitter's record grant covers its events; no other function names outbox keys."""
    template = synthesized.templates[STACK]
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


def test_the_publisher_needs_the_table_s_stream_and_the_emitters_prefixes() -> None:
    """Without outbox=True, with no key prefix, or one that would widen the grant: ValueError."""
    stack = cdk.Stack(cdk.App(), "NoOutbox")
    function = python_function(stack, "Publisher")
    bus = events.EventBus(stack, "Bus")
    plain = IdempotencyTable(stack, "Plain")
    with pytest.raises(ValueError, match="outbox=True"):
        plain.add_outbox_publisher(function, key_prefixes=["orders.create"], event_bus=bus)
    table = IdempotencyTable(stack, "WithOutbox", outbox=True)
    for prefixes in ([], ["orders.*"], ["a#b"]):
        with pytest.raises(ValueError, match="key_prefixes"):
            table.add_outbox_publisher(function, key_prefixes=prefixes, event_bus=bus)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]
