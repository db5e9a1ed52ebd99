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
