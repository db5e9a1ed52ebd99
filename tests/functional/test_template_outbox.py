"""template.yaml's outbox, read as data: the stream, the publisher's mapping and least-privilege
grants, the bus, the rule, the queue and the consumer, and the alarm on unpublished events.

How they behave on moto's real services: tests/functional/test_sample_outbox.py.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from idempotent_lambda import outbox
from idempotent_lambda._outbox_format import ID, KEY_MARK, item_key
from idempotent_lambda.testing import dynamodb_stream_event
from samples.app.orders import EVENT_SOURCE, ORDER_CREATED, OUTBOX_KEY_PREFIXES
from samples.local_lambda import filter_records
from samples.local_stack import load_template
from tests.functional.test_template import (
    CLIENT_METHOD_ACTIONS,
    IDEMPOTENCY_TABLE_ARN,
    PUBLISHER,
    SWEEPER,
    alarms_on,
    as_list,
    dimension,
    key_prefix_in,
    resources,
    statements,
)

ROOT = Path(__file__).resolve().parents[2]
TABLE_STREAM = {"Fn::GetAtt": ["IdempotencyTable", "StreamArn"]}
#: The store methods the publisher calls on a batch (`outbox.publish_handler`).
PUBLISHER_METHODS = {"outbox_items", "outbox_mark_published"}
#: The store method the sweeper adds (`outbox.sweep_handler`): it reads the index.
SWEEPER_METHODS = {"outbox_pending_keys"}
#: The store methods only operators call (the CLI, with their own credentials).
OPERATOR_METHODS = {"outbox_find", "outbox_scan", "outbox_probe", "_outbox_pages"}
#: The one function that emits (outbox.emit), and a record key and event id of its.
EMITTER = "CreateOrderFunction"
EVENT_ID = str(uuid.uuid4())


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template(ROOT / "template.yaml")


def function(template: dict[str, Any], name: str) -> dict[str, Any]:
    return resources(template, "AWS::Serverless::Function")[name]


def by_sid(function: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["Sid"]: s for s in statements(function)}


def client_calls(path: Path) -> dict[str, set[str]]:
    """The ``client.<method>(...)`` calls of each method of the module at ``path``, with those
    of the module's methods it calls as ``self.<method>(...)``."""
    direct: dict[str, set[str]] = {}
    own: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef):
            called = [
                (call.func.value.id, call.func.attr)
                for call in ast.walk(node)
                if isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and isinstance(call.func.value, ast.Name)
            ]
            direct[node.name] = {attr for name, attr in called if name == "client"}
            own[node.name] = {attr for name, attr in called if name == "self"}

    def sent(method: str, seen: frozenset[str]) -> set[str]:
        found = set(direct[method])
        for callee in own[method] & set(direct) - seen:
            found |= sent(callee, seen | {callee})
        return found

    return {method: sent(method, frozenset({method})) for method in direct}


def leading_keys(statement: dict[str, Any]) -> list[str]:
    return list(statement["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"])


def outbox_keys(prefix: str) -> list[str]:
    """Outbox item keys under ``prefix``: a record's event, and a body's run without a record."""
    return [f"{prefix}#{'ab' * 32}{KEY_MARK}{EVENT_ID}", f"{prefix}{KEY_MARK}{EVENT_ID}"]


def may_read(patterns: list[str], key: str) -> bool:
    """Tell whether a LeadingKeys condition with ``patterns`` lets a request name ``key``."""
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in patterns)


def outbox_mapping(template: dict[str, Any]) -> dict[str, Any]:
    return resources(template, "AWS::Lambda::EventSourceMapping")["OutboxStreamEventSourceMapping"]


def inserted(key: str, **image: Any) -> dict[str, Any]:
    """The stream record of an item's INSERT, as Lambda delivers it."""
    (record,) = dynamodb_stream_event(
        keys={"id": key}, new_image={"id": key, **image}, event_name="INSERT"
    )["Records"]
    return record


def test_the_emitter_s_record_grant_covers_its_outbox_items(template: dict[str, Any]) -> None:
    """An event's item key starts with its record's key: CreateOrder's PutItem on its own key
    prefix covers it, and no statement of its names outbox keys apart."""
    emitter = function(template, EMITTER)
    prefix = key_prefix_in(emitter["Handler"])
    record_key = f"{prefix}#{'ab' * 32}"
    (records,) = [s for s in statements(emitter) if s["Resource"] == IDEMPOTENCY_TABLE_ARN]
    assert "dynamodb:PutItem" in records["Action"]
    (pattern,) = leading_keys(records)
    assert fnmatch.fnmatchcase(item_key(record_key, EVENT_ID), pattern)
    assert (ROOT / "samples/app/create_order.py").read_text("utf-8").count("outbox.emit(") == 1


@pytest.mark.parametrize("name", [PUBLISHER, SWEEPER])
def test_the_outbox_functions_may_touch_the_emitter_s_outbox_items_and_no_record(
    template: dict[str, Any], name: str
) -> None:
    """Their LeadingKeys patterns match CreateOrder's outbox items (a record's, and a body's run
    without a record), not one of its records, nor another function's items."""
    prefix = key_prefix_in(function(template, EMITTER)["Handler"])
    assert (prefix,) == OUTBOX_KEY_PREFIXES
    patterns = leading_keys(by_sid(function(template, name))["MarkOutboxEventsPublished"])
    assert all(may_read(patterns, key) for key in outbox_keys(prefix))
    assert not may_read(patterns, f"{prefix}#{'ab' * 32}")
    assert not any(may_read(patterns, key) for key in outbox_keys("orders.other"))
    assert not any(may_read(patterns, key) for key in outbox_keys(f"{prefix}x"))


def test_the_idempotency_table_streams_new_images(template: dict[str, Any]) -> None:
    """The publisher reads the inserted outbox item from the stream: NEW_IMAGE at least."""
    table = resources(template, "AWS::DynamoDB::Table")["IdempotencyTable"]
    view = table["StreamSpecification"]["StreamViewType"]
    assert view in {"NEW_IMAGE", "NEW_AND_OLD_IMAGES"}


def test_the_publisher_s_mapping_reads_the_table_stream_bounded_and_in_order(
    template: dict[str, Any],
) -> None:
    """The alias of PublishEvents, on IdempotencyTable's stream, per-record failures, bounded
    retries with an on-failure queue, one batch per shard."""
    mapping = resources(template, "AWS::Lambda::EventSourceMapping")[
        "OutboxStreamEventSourceMapping"
    ]
    assert {"Ref": f"{PUBLISHER}.Alias"} == mapping["FunctionName"]
    assert TABLE_STREAM == mapping["EventSourceArn"]
    assert ["ReportBatchItemFailures"] == mapping["FunctionResponseTypes"]
    assert 1 == mapping["ParallelizationFactor"]
    assert 0 <= mapping["MaximumRetryAttempts"] <= 10
    assert 60 <= mapping["MaximumRecordAgeInSeconds"] <= 24 * 3600
    assert {"Fn::GetAtt": ["OutboxPublishFailureQueue", "Arn"]} == mapping["DestinationConfig"][
        "OnFailure"
    ]["Destination"]


def test_the_publisher_s_filter_is_outbox_inserts_of_its_own_prefixes(
    template: dict[str, Any],
) -> None:
    """One pattern: the library's (INSERTs of items with an outbox id), narrowed to keys under
    the prefixes the publisher serves, `<prefix>#`.

    Evaluated on real stream records in test_sample_outbox.py.
    """
    (pattern,) = [
        json.loads(f["Pattern"]) for f in outbox_mapping(template)["FilterCriteria"]["Filters"]
    ]
    prefixes = [{"prefix": f"{p}#"} for p in OUTBOX_KEY_PREFIXES]
    assert {
        "eventName": outbox.STREAM_FILTER_PATTERN["eventName"],
        "dynamodb": {
            "Keys": {"id": {"S": prefixes}},
            **outbox.STREAM_FILTER_PATTERN["dynamodb"],
        },
    } == pattern
    assert {"eventName": ["INSERT"], "dynamodb": {"NewImage": {ID: {"S": [{"exists": True}]}}}} == (
        outbox.STREAM_FILTER_PATTERN
    )


def test_the_publisher_is_delivered_only_the_items_it_may_read(template: dict[str, Any]) -> None:
    """Of outbox INSERTs, the filter keeps those under the publisher's LeadingKeys grant and
    drops another function's (which the batch's one BatchGetItem could not read: AccessDenied
    for the whole batch). Records of the emitter's own idempotency items are dropped too."""
    patterns = [str(f["Pattern"]) for f in outbox_mapping(template)["FilterCriteria"]["Filters"]]
    granted = leading_keys(by_sid(function(template, PUBLISHER))["MarkOutboxEventsPublished"])
    (prefix,) = OUTBOX_KEY_PREFIXES
    ours = [inserted(key, **{ID: EVENT_ID}) for key in outbox_keys(prefix)]
    others = [
        inserted(key, **{ID: EVENT_ID})
        for other in ("orders.process_payment", f"{prefix}x", "orders")
        for key in outbox_keys(other)
    ]
    record = inserted(f"{prefix}#{'ab' * 32}", status="COMPLETED")

    kept = filter_records([*ours, *others, record], patterns)

    assert ours == kept
    assert all(may_read(granted, r["dynamodb"]["Keys"]["id"]["S"]) for r in kept)
    assert not any(may_read(granted, r["dynamodb"]["Keys"]["id"]["S"]) for r in others)


def test_the_publisher_gets_exactly_what_it_calls(template: dict[str, Any]) -> None:
    """PutEvents on the bus only; the stream's reads; BatchGetItem and UpdateItem on outbox keys
    only (no idempotency record); SendMessage to its failure queue. Nothing else."""
    grants = {
        sid: (sorted(as_list(s["Action"])), s["Resource"], "Condition" in s)
        for sid, s in by_sid(function(template, PUBLISHER)).items()
    }
    assert {
        "MarkOutboxEventsPublished": (
            ["dynamodb:BatchGetItem", "dynamodb:UpdateItem"],
            IDEMPOTENCY_TABLE_ARN,
            True,
        ),
        "PublishOrderEvents": (
            ["events:PutEvents"],
            {"Fn::GetAtt": ["OrderEventsBus", "Arn"]},
            True,
        ),
        "ReadIdempotencyStream": (
            ["dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"],
            TABLE_STREAM,
            False,
        ),
        "ListIdempotencyStreams": (
            ["dynamodb:ListStreams"],
            {"Fn::Sub": "${IdempotencyTable.Arn}/stream/*"},
            False,
        ),
        "ReportFailedBatches": (
            ["sqs:SendMessage"],
            {"Fn::GetAtt": ["OutboxPublishFailureQueue", "Arn"]},
            False,
        ),
    } == grants


def test_the_publisher_s_store_calls_are_the_granted_ones(template: dict[str, Any]) -> None:
    """What the publisher's store methods send is what MarkOutboxEventsPublished allows; the
    sweeper's index read is a Query (a Scan only when it serves every prefix, which the sample's
    never does); the operators' methods (list, read one) are granted to no function."""
    calls = client_calls(ROOT / "idempotent_lambda/persistence/dynamodb/_outbox.py")
    placed = PUBLISHER_METHODS | SWEEPER_METHODS | OPERATOR_METHODS
    assert placed <= set(calls)
    sending = {method for method, sent in calls.items() if sent and not method.startswith("_")}
    assert sending <= placed  # a new one must be placed here
    publisher = ast.parse((ROOT / "idempotent_lambda/outbox/_publisher.py").read_text("utf-8"))
    used = {
        node.attr
        for node in ast.walk(publisher)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "store"
    }
    assert used & sending == PUBLISHER_METHODS  # what the publisher calls that sends requests
    actions = {
        "batch_get_item": "dynamodb:BatchGetItem",
        "update_item": "dynamodb:UpdateItem",
        **CLIENT_METHOD_ACTIONS,
    }
    sent = {actions[call] for method in PUBLISHER_METHODS for call in calls[method]}
    granted = by_sid(function(template, PUBLISHER))["MarkOutboxEventsPublished"]["Action"]
    assert sorted(granted) == sorted(sent)
    assert set() == calls["outbox_put"]  # emit's write is a Put of the record's transaction
    sweep = (ROOT / "idempotent_lambda/outbox/_core.py").read_text("utf-8")
    assert "store.outbox_pending_keys(" in sweep
    assert {"query", "scan"} == calls["outbox_pending_keys"]
    query = by_sid(function(template, SWEEPER))["FindUnpublishedOutboxItems"]["Action"]
    assert ["dynamodb:Query"] == query


def test_the_rule_sends_order_created_to_the_consumer_s_queue(template: dict[str, Any]) -> None:
    """On OrderEventsBus: OrderCreated of the app's source, to OrderEventsQueue, retried for a
    day, then kept in the dead-letter queue."""
    rule = resources(template, "AWS::Events::Rule")["OrderCreatedRule"]
    assert {"Ref": "OrderEventsBus"} == rule["EventBusName"]
    assert {"source": [EVENT_SOURCE], "detail-type": [ORDER_CREATED]} == rule["EventPattern"]
    (target,) = rule["Targets"]
    assert {"Fn::GetAtt": ["OrderEventsQueue", "Arn"]} == target["Arn"]
    assert {"Arn": {"Fn::GetAtt": ["OrderEventsDeadLetterQueue", "Arn"]}} == target[
        "DeadLetterConfig"
    ]
    assert target["RetryPolicy"]["MaximumEventAgeInSeconds"] <= 86400
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    assert {"Ref": "OrderEventsBus"} == variables["ORDER_EVENTS_BUS"]


def test_only_the_rule_may_send_to_the_order_event_queues(template: dict[str, Any]) -> None:
    """The queue policy: EventBridge's SendMessage, on behalf of OrderCreatedRule only."""
    (policy,) = resources(template, "AWS::SQS::QueuePolicy").values()
    queues = [{"Ref": "OrderEventsQueue"}, {"Ref": "OrderEventsDeadLetterQueue"}]
    assert queues == policy["Queues"]
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert ("Allow", {"Service": "events.amazonaws.com"}, "sqs:SendMessage") == (
        statement["Effect"],
        statement["Principal"],
        statement["Action"],
    )
    assert {"ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": ["OrderCreatedRule", "Arn"]}}} == (
        statement["Condition"]
    )


def test_the_consumer_reads_its_queue_and_dedups_on_the_outbox_id(
    template: dict[str, Any],
) -> None:
    """ReserveStock: its queue's mapping with per-message failures, a dead-letter queue, its
    queue's and the stock table's actions only, and the OUTBOX_EVENT key."""
    mapping = resources(template, "AWS::Lambda::EventSourceMapping")[
        "OrderEventsEventSourceMapping"
    ]
    assert {"Ref": "ReserveStockFunction.Alias"} == mapping["FunctionName"]
    assert {"Fn::GetAtt": ["OrderEventsQueue", "Arn"]} == mapping["EventSourceArn"]
    assert ["ReportBatchItemFailures"] == mapping["FunctionResponseTypes"]
    queue = resources(template, "AWS::SQS::Queue")["OrderEventsQueue"]
    assert {"Fn::GetAtt": ["OrderEventsDeadLetterQueue", "Arn"]} == queue["RedrivePolicy"][
        "deadLetterTargetArn"
    ]
    timeout = template["Globals"]["Function"]["Timeout"]
    assert queue["VisibilityTimeout"] > 6 * timeout + mapping["MaximumBatchingWindowInSeconds"]
    grants = by_sid(function(template, "ReserveStockFunction"))
    assert {"Fn::GetAtt": ["OrderEventsQueue", "Arn"]} == grants["ConsumeOrderEvents"]["Resource"]
    assert (["dynamodb:UpdateItem"], {"Fn::GetAtt": ["StockTable", "Arn"]}) == (
        as_list(grants["ReserveStock"]["Action"]),
        grants["ReserveStock"]["Resource"],
    )
    source = (ROOT / "samples/app/reserve_stock.py").read_text(encoding="utf-8")
    assert "event_key_jmespath=event_keys.OUTBOX_EVENT," in source


def test_unpublished_events_are_alarmed_where_the_publisher_measures_them(
    template: dict[str, Any],
) -> None:
    """The age of the oldest unpublished event: the metric the publisher emits, in the functions'
    namespace and service; the deploy of PublishEvents rolls back on it."""
    publisher = (ROOT / "idempotent_lambda/outbox/_publisher.py").read_text(encoding="utf-8")
    metric = outbox.AGE_METRIC  # the name the publisher's EMF document carries (tests/integration)
    assert "POWERTOOLS_METRICS_NAMESPACE" in publisher  # the functions' namespace
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    (alarm,) = alarms_on(template, variables["POWERTOOLS_METRICS_NAMESPACE"], metric)
    assert {"service": variables["POWERTOOLS_SERVICE_NAME"]} == dimension(alarm)
    assert ("Maximum", "GreaterThanThreshold") == (alarm["Statistic"], alarm["ComparisonOperator"])
    assert 0 < alarm["Threshold"] <= 900
    watched = function(template, PUBLISHER)["DeploymentPreference"]["Alarms"]
    assert {"Ref": "OutboxUnpublishedAgeAlarm"} in watched


def put_events_statements(template: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Every function's statements that allow events:PutEvents, by function."""
    found: dict[str, list[dict[str, Any]]] = {}
    for name, props in resources(template, "AWS::Serverless::Function").items():
        for statement in statements(props):
            if "events:PutEvents" in as_list(statement["Action"]):
                found.setdefault(name, []).append(statement)
    return found


def test_only_the_outbox_functions_may_put_events_and_only_their_source(
    template: dict[str, Any],
) -> None:
    """PutEvents: the publisher and the sweeper, on OrderEventsBus, for EVENT_SOURCE only (the
    `events:source` condition, one value per entry of a PutEvents)."""
    granted = put_events_statements(template)
    assert {PUBLISHER, SWEEPER} == set(granted)
    for name, found in granted.items():
        (statement,) = found
        assert {"Fn::GetAtt": ["OrderEventsBus", "Arn"]} == statement["Resource"], name
        assert {"StringEquals": {"events:source": EVENT_SOURCE}} == statement["Condition"], name
    source = (ROOT / "samples/app/create_order.py").read_text(encoding="utf-8")
    assert "source=EVENT_SOURCE," in source


def test_the_bus_lets_no_other_principal_put_the_outbox_s_source(
    template: dict[str, Any],
) -> None:
    """OrderEventsBus's policy denies PutEvents of EVENT_SOURCE to every principal, of any
    account, but the roles of the two functions granted it; nothing else in the policy."""
    (policy,) = resources(template, "AWS::Events::EventBusPolicy").values()
    assert {"Ref": "OrderEventsBus"} == policy["EventBusName"]
    statement = policy["Statement"]
    assert ("Deny", "*", "events:PutEvents") == (
        statement["Effect"],
        statement["Principal"],
        statement["Action"],
    )
    assert {"Fn::GetAtt": ["OrderEventsBus", "Arn"]} == statement["Resource"]
    roles = [{"Fn::GetAtt": [f"{name}Role", "Arn"]} for name in (PUBLISHER, SWEEPER)]
    assert {
        "StringEquals": {"events:source": EVENT_SOURCE},
        "ArnNotEquals": {"aws:PrincipalArn": roles},
    } == statement["Condition"]
    assert set(put_events_statements(template)) == {r["Fn::GetAtt"][0][:-4] for r in roles}
    assert not {"Policy"} & set(resources(template, "AWS::Events::EventBus")["OrderEventsBus"])
