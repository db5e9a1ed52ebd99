"""The outbox's infrastructure beside `IdempotencyTable`: its index, filters, grants, bus policy.

Every name here is one the library writes or reads (`idempotent_lambda.outbox`); the
repository's tests tie them to it. `IdempotencyTable.add_outbox_publisher` puts them together.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

#: Between a record's key and the event's slot in its outbox items' keys (`idempotent_lambda.
#: outbox`: `<record key>#outbox#<slot>`, or `<key prefix>#outbox#<slot>` for a body run
#: without a record; no record's key holds it).
OUTBOX_KEY_MARK = "#outbox#"
#: What the publisher calls on outbox items: one read of a batch's items, a mark per event.
PUBLISH_ACTIONS = ("dynamodb:BatchGetItem", "dynamodb:UpdateItem")
#: What Lambda's event source mapping reads the stream with, on the publisher's role.
STREAM_ACTIONS = ("dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator")
#: The sparse index of unpublished outbox items (`outbox.sweep_handler` reads it): an item
#: carries `outbox_pending` (`<key prefix>#<shard>`) until it is marked published.
OUTBOX_INDEX = "outbox-unpublished"
OUTBOX_PENDING_ATTRIBUTE = "outbox_pending"
OUTBOX_EMITTED_AT_ATTRIBUTE = "outbox_emitted_at"
#: What the sweeper calls on the index: a Query per served prefix and shard.
SWEEP_ACTIONS = ("dynamodb:Query",)
#: The attribute that marks an outbox item (the stream filter's test for one).
_OUTBOX_ID_ATTRIBUTE = "outbox_id"


def add_outbox_index(table: dynamodb.Table) -> None:
    """Add the sparse index of unpublished outbox items, keys only, to `table`."""
    table.add_global_secondary_index(
        index_name=OUTBOX_INDEX,
        partition_key=dynamodb.Attribute(
            name=OUTBOX_PENDING_ATTRIBUTE, type=dynamodb.AttributeType.STRING
        ),
        sort_key=dynamodb.Attribute(
            name=OUTBOX_EMITTED_AT_ATTRIBUTE, type=dynamodb.AttributeType.NUMBER
        ),
        projection_type=dynamodb.ProjectionType.KEYS_ONLY,
    )


def outbox_key_patterns(key_prefixes: Sequence[str]) -> list[str]:
    """Return the LeadingKeys patterns of the outbox items of `key_prefixes`, and no record."""
    return [
        pattern
        for prefix in key_prefixes
        for pattern in (f"{prefix}#*{OUTBOX_KEY_MARK}*", f"{prefix}{OUTBOX_KEY_MARK}*")
    ]


def stream_filter(key_prefixes: Sequence[str]) -> lambda_.FilterCriteria:
    """Return the filter that delivers the INSERTs of the outbox items of `key_prefixes` only.

    The items a publisher granted `outbox_key_patterns(key_prefixes)` may read: another
    function's item never reaches its batch, whose one BatchGetItem it would fail.
    """
    return lambda_.FilterCriteria.filter(
        {
            "eventName": lambda_.FilterRule.is_equal("INSERT"),
            "dynamodb": {
                "Keys": {"id": {"S": [{"prefix": f"{prefix}#"} for prefix in key_prefixes]}},
                "NewImage": {_OUTBOX_ID_ATTRIBUTE: {"S": lambda_.FilterRule.exists()}},
            },
        }
    )


def grant_outbox_items(
    grantee: iam.IGrantable, table_arn: str, key_prefixes: Sequence[str]
) -> None:
    """Let `grantee` read and mark the outbox items of `key_prefixes`, and nothing else."""
    iam.Grant.add_to_principal(
        grantee=grantee,
        actions=list(PUBLISH_ACTIONS),
        resource_arns=[table_arn],
        conditions={
            "ForAllValues:StringLike": {"dynamodb:LeadingKeys": outbox_key_patterns(key_prefixes)}
        },
    )


def grant_put_events(
    grantee: iam.IGrantable, event_bus: events.IEventBus, sources: Sequence[str]
) -> None:
    """Let `grantee` put events of `sources` on `event_bus`, and of no other source."""
    iam.Grant.add_to_principal(
        grantee=grantee,
        actions=["events:PutEvents"],
        resource_arns=[event_bus.event_bus_arn],
        conditions={"StringEquals": {"events:source": list(sources)}},
    )


def grant_sweep(grantee: iam.IGrantable, table_arn: str, key_prefixes: Sequence[str]) -> None:
    """Let `grantee` query the index partitions of `key_prefixes` (`<prefix>#<shard>`)."""
    iam.Grant.add_to_principal(
        grantee=grantee,
        actions=list(SWEEP_ACTIONS),
        resource_arns=[f"{table_arn}/index/{OUTBOX_INDEX}"],
        conditions={
            "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{p}#*" for p in key_prefixes]}
        },
    )


def schedule_sweeper(scope: Construct, sweeper: lambda_.IFunction, every: Duration) -> None:
    """Invoke `sweeper` every `every`, without retrying a failed run (the next one follows)."""
    events.Rule(
        scope,
        f"OutboxSweep{sweeper.node.id}",
        schedule=events.Schedule.rate(every),
        targets=[targets.LambdaFunction(sweeper, retry_attempts=0)],
    )


def reserve_sources(
    scope: Construct,
    event_bus: events.IEventBus,
    sources: Sequence[str],
    principals: Sequence[lambda_.Function],
) -> None:
    """Deny putting `sources` on `event_bus` to every principal but the roles of `principals`.

    A Deny in the bus's resource policy: no identity policy of this account or another can
    override it, so an event of these sources on the bus was put by one of `principals`.

    Raises:
        ValueError: A function of `principals` has no role of its own in this app.
    """
    roles = [function.role for function in principals]
    if any(role is None for role in roles):
        raise ValueError("the outbox's functions need roles (a Function made with its role)")
    statement: dict[str, Any] = {
        "Effect": "Deny",
        "Principal": "*",
        "Action": "events:PutEvents",
        "Resource": event_bus.event_bus_arn,
        "Condition": {
            "StringEquals": {"events:source": list(sources)},
            "ArnNotEquals": {"aws:PrincipalArn": [role.role_arn for role in roles if role]},
        },
    }
    publisher = principals[0]
    events.CfnEventBusPolicy(
        scope,
        f"OutboxSources{publisher.node.id}",
        event_bus_name=event_bus.event_bus_name,
        statement_id=f"OnlyTheOutbox{publisher.node.addr[:24]}",
        statement=statement,
    )
