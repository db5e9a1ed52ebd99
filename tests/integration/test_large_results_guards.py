"""Offloaded results against a tampered table: references are followed only into the configured
bucket and prefix, objects are written under SSE-KMS when asked, and a stored result that
inflates past the limit is refused (moto's S3 on the test server). moto does not check
``ExpectedBucketOwner``: tests/unit/test_limits.py covers it with an S3 double that does."""

from __future__ import annotations

import base64
import json
import os
import zlib
from typing import TYPE_CHECKING, Any

import pytest

from idempotent_lambda import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    IdempotencyPersistenceLayerError,
    idempotent,
)
from idempotent_lambda._identity import digest
from idempotent_lambda.testing import FakeLambdaContext

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

CONFIG = IdempotencyConfig(record_format="native", event_key_jmespath="order_id")  # offloads
EVENT = {"order_id": 7}
BIG = base64.b64encode(os.urandom(600_000)).decode()
MOTO_ACCOUNT = "123456789012"


def make_store(table: str, client: Any, s3_client: Any, bucket: str, **options: Any) -> Any:
    return DynamoDBPersistenceLayer(
        table, boto3_client=client, large_result_bucket=bucket, s3_client=s3_client, **options
    )


def handler_of(store: DynamoDBPersistenceLayer, runs: list[int]) -> Any:
    @idempotent(persistence_store=store, config=CONFIG, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(1)
        return {"report": BIG}

    return handler


def rewrite_reference(client: DynamoDBClient, table: str, **changes: Any) -> None:
    """Tamper with the stored reference of EVENT's record."""
    key = {"id": {"S": f"orders#{digest(CONFIG, EVENT['order_id'])}"}}
    item = client.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
    wrapped = json.loads(item["data"]["S"])
    wrapped["$s3"].update(changes)
    item["data"] = {"S": json.dumps(wrapped, separators=(",", ":"))}
    client.put_item(TableName=table, Item=item)


@pytest.mark.parametrize(
    "changes", [{"bucket": "someone-elses-bucket"}, {"key": "private/payroll.csv"}]
)
def test_a_reference_outside_the_bucket_or_prefix_is_not_followed(
    idempotency_table: str,
    dynamodb_client: DynamoDBClient,
    s3_client: Any,
    bucket: str,
    changes: dict[str, str],
) -> None:
    """The replay fails with a store error, sends no GetObject, and never runs the body twice."""
    store = make_store(idempotency_table, dynamodb_client, s3_client, bucket)
    runs: list[int] = []
    handler = handler_of(store, runs)
    handler(EVENT, FakeLambdaContext())
    rewrite_reference(dynamodb_client, idempotency_table, **changes)
    sent: list[str] = []
    s3_client.meta.events.register("before-call.s3", lambda model, **kw: sent.append(model.name))
    with pytest.raises(IdempotencyPersistenceLayerError, match="outside the configured"):
        handler(EVENT, FakeLambdaContext())
    assert [] == sent
    assert 1 == len(runs)


def test_objects_go_to_the_expected_owner_under_sse_kms(
    idempotency_table: str,
    dynamodb_client: DynamoDBClient,
    dynamodb_endpoint: str,
    s3_client: Any,
    bucket: str,
) -> None:
    """With an owner and a KMS key configured, the object is written encrypted and replays."""
    import boto3

    key_id = boto3.client(
        "kms",
        endpoint_url=dynamodb_endpoint,  # the same moto server serves KMS
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_key()["KeyMetadata"]["KeyId"]
    store = make_store(
        idempotency_table,
        dynamodb_client,
        s3_client,
        bucket,
        large_result_bucket_owner=MOTO_ACCOUNT,
        large_result_kms_key_id=key_id,
    )
    runs: list[int] = []
    handler = handler_of(store, runs)
    handler(EVENT, FakeLambdaContext())
    (stored,) = s3_client.list_objects_v2(Bucket=bucket)["Contents"]
    head = s3_client.head_object(Bucket=bucket, Key=stored["Key"])
    assert "aws:kms" == head["ServerSideEncryption"]
    assert key_id in head["SSEKMSKeyId"]
    assert {"report": BIG} == handler(EVENT, FakeLambdaContext())
    assert 1 == len(runs)


def test_a_stored_result_that_inflates_past_the_limit_is_refused(
    idempotency_table: str,
    dynamodb_client: DynamoDBClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A compressed ``data`` attribute bigger than the limit once inflated is a store error."""
    store = DynamoDBPersistenceLayer(idempotency_table, boto3_client=dynamodb_client)
    runs: list[int] = []

    @idempotent(persistence_store=store, config=CONFIG, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(1)
        return "x"

    handler(EVENT, FakeLambdaContext())
    key = {"id": {"S": f"orders#{digest(CONFIG, EVENT['order_id'])}"}}
    item = dynamodb_client.get_item(TableName=idempotency_table, Key=key)["Item"]
    item["data"] = {"B": zlib.compress(b'"' + b"a" * 5_000_000 + b'"', 9)}
    dynamodb_client.put_item(TableName=idempotency_table, Item=item)
    monkeypatch.setenv("IDEMPOTENCY_MAX_STORED_RESULT_BYTES", "1000000")
    with pytest.raises(IdempotencyPersistenceLayerError):
        handler(EVENT, FakeLambdaContext())
    assert 1 == len(runs)


def test_an_object_larger_than_its_reference_declares_is_refused_unread(
    idempotency_table: str, dynamodb_client: DynamoDBClient, s3_client: Any, bucket: str
) -> None:
    """A replaced, larger object is refused, and no more than the declared size plus one byte of
    it is read (the body's own count of bytes read)."""
    store = make_store(idempotency_table, dynamodb_client, s3_client, bucket)
    runs: list[int] = []
    handler = handler_of(store, runs)
    handler(EVENT, FakeLambdaContext())
    (stored,) = s3_client.list_objects_v2(Bucket=bucket)["Contents"]
    declared = stored["Size"]
    original = s3_client.get_object(Bucket=bucket, Key=stored["Key"])["Body"].read()
    s3_client.put_object(Bucket=bucket, Key=stored["Key"], Body=original + os.urandom(4_000_000))
    bodies: list[Any] = []
    s3_client.meta.events.register(
        "after-call.s3.GetObject", lambda parsed, **_: bodies.append(parsed["Body"])
    )

    with pytest.raises(IdempotencyPersistenceLayerError, match="does not match"):
        handler(EVENT, FakeLambdaContext())
    assert (1, 1) == (len(runs), len(bodies))
    assert bodies[0].tell() <= declared + 1
