"""The key presets: each one finds what its service repeats on redelivery, and only that."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyConfig,
    IdempotencyKeyError,
    InMemoryPersistenceLayer,
    event_keys,
    idempotent,
)
from idempotent_lambda.testing import FakeLambdaContext

#: Shaped as in Lambda's documentation of each event source.
EVENTBRIDGE_EVENT = {
    "version": "0",
    "id": "fe8d3c65-xmpl-c5c3-2c87-81584709a377",
    "detail-type": "RDS DB Instance Event",
    "source": "aws.rds",
    "account": "123456789012",
    "time": "2020-04-28T07:20:20Z",
    "region": "us-east-2",
    "resources": ["arn:aws:rds:us-east-2:123456789012:db:rdz6xmpliljlb1"],
    "detail": {"EventCategories": ["backup"], "SourceType": "DB_INSTANCE"},
}
SNS_EVENT = {
    "Records": [
        {
            "EventVersion": "1.0",
            "EventSubscriptionArn": "arn:aws:sns:us-east-1:123456789012:orders:2bcfbf39-05c3",
            "EventSource": "aws:sns",
            "Sns": {
                "SignatureVersion": "1",
                "Timestamp": "2019-01-02T12:45:07.000Z",
                "Signature": "tcc6faL2yUC6dgZdmrwh1Y4cGa/ebXEkAi6RibDsvpi+tE/1+82j...65r==",
                "SigningCertUrl": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService.pem",
                "MessageId": "95df01b4-ee98-5cb9-9903-4c221d41eb5e",
                "Message": '{"order_id": 7}',
                "MessageAttributes": {},
                "Type": "Notification",
                "UnsubscribeUrl": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe",
                "TopicArn": "arn:aws:sns:us-east-1:123456789012:orders",
                "Subject": "order",
            },
        }
    ]
}
S3_EVENT = {
    "Records": [
        {
            "eventVersion": "2.1",
            "eventSource": "aws:s3",
            "awsRegion": "us-east-1",
            "eventTime": "2019-09-03T19:37:27.192Z",
            "eventName": "ObjectCreated:Put",
            "userIdentity": {"principalId": "AWS:AIDAINPONIXQXHT3IKHL2"},
            "requestParameters": {"sourceIPAddress": "205.255.255.255"},
            "responseElements": {
                "x-amz-request-id": "D82B88E5F771F645",
                "x-amz-id-2": "vlR7PnpV2Ce81l0PRw6jlUpck7Jo5ZsQjryTjKlc5aLWGVHPZLj5NeC6qMa0emY=",
            },
            "s3": {
                "s3SchemaVersion": "1.0",
                "configurationId": "828aa6fc-f7b5-4305-8584-487c791949c1",
                "bucket": {
                    "name": "reports",
                    "ownerIdentity": {"principalId": "A3I5XTEXAMAI3E"},
                    "arn": "arn:aws:s3:::reports",
                },
                "object": {
                    "key": "2019/summary.csv",
                    "size": 1305107,
                    "eTag": "b21b84d653bb07b05b1e6b33684dc11b",
                    "sequencer": "0C0F6F405D6ED209E1",
                },
            },
        }
    ]
}
#: The payload examples/step_functions/ passes to its task (``$$`` is the context object).
STEP_FUNCTIONS_EVENT = {
    "input": {"order_id": "o-1", "items": [{"sku": "A-1", "quantity": 2}]},
    "execution_id": "arn:aws:states:us-east-1:123456789012:execution:Orders:3a4e2a40-xmpl",
    "state_name": "ReserveStock",
    "retry_count": 0,
}
CLOUDFORMATION_EVENT = {
    "RequestType": "Create",
    "ResponseURL": "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/x",
    "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/shop/5b1d7f40-xmpl",
    "RequestId": "6f8e4b2c-xmpl-4c4e-9d3a-1c2b3d4e5f60",
    "ResourceType": "Custom::Subscription",
    "LogicalResourceId": "Subscription",
    "ResourceProperties": {"ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:cr"},
}
#: The target input examples/scheduler/ documents, as Scheduler fills it in.
SCHEDULER_EVENT = {
    "schedule_arn": "arn:aws:scheduler:us-east-1:123456789012:schedule/default/nightly-report",
    "scheduled_time": "2026-12-07T02:00:00Z",
    "execution_id": "d32c5kddcf5bb8c3",
    "attempt": "1",
    "report": "sales",
}
S3_BATCH_EVENT = {
    "invocationSchemaVersion": "1.0",
    "invocationId": "YXNkbGZqYWRmaiBhc2RmdW9hZHNmZGpmaGFzbGtkaGZza2RmaAo",
    "job": {"id": "f3cc4f60-61f6-4a2b-8a21-d07600c373ce"},
    "tasks": [
        {
            "taskId": "dGFza2lkZ29lc2hlcmUK",
            "s3Key": "customerImage1.jpg",
            "s3VersionId": "1",
            "s3BucketArn": "arn:aws:s3:::reports",
        }
    ],
}
S3_BATCH_EVENT_V2 = {
    "invocationSchemaVersion": "2.0",
    "invocationId": "YXNkbGZqYWRmaiBhc2RmdW9hZHNmZGpmaGFzbGtkaGZza2RmaAo",
    "job": {"id": "f3cc4f60-61f6-4a2b-8a21-d07600c373ce", "userArguments": {"size": "128"}},
    "tasks": [
        {
            "taskId": "dGFza2lkZ29lc2hlcmUK",
            "s3Key": "customerImage1.jpg",
            "s3VersionId": None,
            "s3Bucket": "reports",
        }
    ],
}


def with_change(event: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """Return a copy of ``event`` with the value at ``path`` replaced."""
    changed = copy.deepcopy(event)
    target: Any = changed
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return changed


@pytest.mark.parametrize(
    ("expression", "event", "material"),
    [
        (event_keys.EVENTBRIDGE, EVENTBRIDGE_EVENT, "fe8d3c65-xmpl-c5c3-2c87-81584709a377"),
        (event_keys.SNS, SNS_EVENT, "95df01b4-ee98-5cb9-9903-4c221d41eb5e"),
        (event_keys.S3, S3_EVENT, ["reports", "2019/summary.csv", "0C0F6F405D6ED209E1"]),
        (
            event_keys.STEP_FUNCTIONS_TASK,
            STEP_FUNCTIONS_EVENT,
            [STEP_FUNCTIONS_EVENT["execution_id"], "ReserveStock"],
        ),
        (
            event_keys.CLOUDFORMATION_CUSTOM_RESOURCE,
            CLOUDFORMATION_EVENT,
            [CLOUDFORMATION_EVENT["StackId"], CLOUDFORMATION_EVENT["RequestId"], "Subscription"],
        ),
        (
            event_keys.SCHEDULER,
            SCHEDULER_EVENT,
            [SCHEDULER_EVENT["schedule_arn"], "2026-12-07T02:00:00Z"],
        ),
        (
            event_keys.S3_BATCH_OPERATIONS,
            S3_BATCH_EVENT,
            ["f3cc4f60-61f6-4a2b-8a21-d07600c373ce", "dGFza2lkZ29lc2hlcmUK"],
        ),
        (
            event_keys.S3_BATCH_OPERATIONS,
            S3_BATCH_EVENT_V2,
            ["f3cc4f60-61f6-4a2b-8a21-d07600c373ce", "dGFza2lkZ29lc2hlcmUK"],
        ),
    ],
)
def test_each_preset_finds_its_services_delivery_identity(
    expression: str, event: dict[str, Any], material: Any
) -> None:
    """The expression compiles and reads the documented event."""
    assert material == IdempotencyConfig(event_key_jmespath=expression).key_material(event)


#: For each preset: a field its service changes on a retry (the copy must replay), and one
#: that differs between two events (the copy must run).
CASES = [
    (
        event_keys.EVENTBRIDGE,
        EVENTBRIDGE_EVENT,
        ("time",),
        ("id",),
    ),
    (
        event_keys.SNS,
        SNS_EVENT,
        ("Records", 0, "Sns", "Signature"),
        ("Records", 0, "Sns", "MessageId"),
    ),
    (
        event_keys.S3,
        S3_EVENT,
        ("Records", 0, "eventTime"),
        ("Records", 0, "s3", "object", "sequencer"),
    ),
    (
        event_keys.STEP_FUNCTIONS_TASK,
        STEP_FUNCTIONS_EVENT,
        ("retry_count",),
        ("execution_id",),
    ),
    (
        event_keys.CLOUDFORMATION_CUSTOM_RESOURCE,
        CLOUDFORMATION_EVENT,
        ("ResponseURL",),
        ("RequestId",),
    ),
    (
        event_keys.SCHEDULER,
        SCHEDULER_EVENT,
        ("execution_id",),
        ("scheduled_time",),
    ),
    (
        event_keys.S3_BATCH_OPERATIONS,
        S3_BATCH_EVENT,
        ("invocationId",),
        ("tasks", 0, "taskId"),
    ),
]


@pytest.mark.parametrize(("expression", "event", "retried", "distinct"), CASES)
def test_a_redelivery_replays_and_another_event_runs(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    expression: str,
    event: dict[str, Any],
    retried: tuple[Any, ...],
    distinct: tuple[Any, ...],
) -> None:
    """A resend replays the first answer; a different event (a new S3 version) runs again."""
    runs: list[dict[str, Any]] = []
    config = IdempotencyConfig(event_key_jmespath=expression, raise_on_no_idempotency_key=True)

    @idempotent(persistence_store=idempotency_store, config=config)
    def handler(event: dict[str, Any], context: Any) -> int:
        runs.append(event)
        return len(runs)

    assert 1 == handler(event, lambda_context)
    assert 1 == handler(with_change(event, retried, "resent"), lambda_context)
    assert 2 == handler(with_change(event, distinct, "another"), lambda_context)


@pytest.mark.parametrize("event_name", ["ObjectRestore:Completed", "ObjectTagging:Put"])
def test_s3_notification_without_a_sequencer_has_no_key(event_name: str) -> None:
    """Restores and tagging carry no sequencer: no key, rather than one key per object."""
    event = with_change(S3_EVENT, ("Records", 0, "eventName"), event_name)
    del event["Records"][0]["s3"]["object"]["sequencer"]
    config = IdempotencyConfig(event_key_jmespath=event_keys.S3, raise_on_no_idempotency_key=True)
    assert config.key_material(event) is None

    store = InMemoryPersistenceLayer()

    @idempotent(persistence_store=store, config=config)
    def handler(event: dict[str, Any], context: Any) -> None:
        raise AssertionError("must not run")

    with pytest.raises(IdempotencyKeyError):
        handler(event, None)


#: Events of another shape for each multi-field preset: none of its fields, and each field
#: missing or empty in turn (a partial key would merge events that differ in the missing part).
WRONG_SHAPES = [
    (event_keys.STEP_FUNCTIONS_TASK, STEP_FUNCTIONS_EVENT["input"]),
    (event_keys.STEP_FUNCTIONS_TASK, with_change(STEP_FUNCTIONS_EVENT, ("execution_id",), None)),
    (event_keys.STEP_FUNCTIONS_TASK, with_change(STEP_FUNCTIONS_EVENT, ("state_name",), "")),
    (event_keys.CLOUDFORMATION_CUSTOM_RESOURCE, EVENTBRIDGE_EVENT),
    (
        event_keys.CLOUDFORMATION_CUSTOM_RESOURCE,
        with_change(CLOUDFORMATION_EVENT, ("RequestId",), None),
    ),
    (
        event_keys.CLOUDFORMATION_CUSTOM_RESOURCE,
        with_change(CLOUDFORMATION_EVENT, ("LogicalResourceId",), None),
    ),
    (event_keys.SCHEDULER, {}),
    (event_keys.SCHEDULER, EVENTBRIDGE_EVENT),
    (event_keys.SCHEDULER, with_change(SCHEDULER_EVENT, ("scheduled_time",), None)),
    (event_keys.S3_BATCH_OPERATIONS, S3_EVENT),
    (event_keys.S3_BATCH_OPERATIONS, with_change(S3_BATCH_EVENT, ("tasks",), [])),
    (event_keys.S3_BATCH_OPERATIONS, with_change(S3_BATCH_EVENT, ("job",), {})),
    (event_keys.EVENTBRIDGE, SCHEDULER_EVENT),
]


@pytest.mark.parametrize(("expression", "event"), WRONG_SHAPES)
def test_an_event_of_another_shape_has_no_key_and_never_runs_the_body(
    expression: str, event: dict[str, Any]
) -> None:
    """No key at all (never a partial one): with keys required, the body never runs."""
    config = IdempotencyConfig(event_key_jmespath=expression, raise_on_no_idempotency_key=True)
    assert not config.key_material(event)  # None or "": a list of nulls would be a key

    @idempotent(persistence_store=InMemoryPersistenceLayer(), config=config)
    def handler(event: dict[str, Any], context: Any) -> None:
        raise AssertionError("must not run")

    with pytest.raises(IdempotencyKeyError):
        handler(event, None)
