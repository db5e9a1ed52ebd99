"""Results too large for an item, offloaded to S3 (moto's S3 on the same server).

The moto server serves S3 next to DynamoDB; the client uses path-style addressing so bucket
names need no DNS.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest
from botocore.config import Config

from idempotent_lambda import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    IdempotencyConfigError,
    IdempotencyPersistenceLayerError,
    IdempotencyUnstorableResultError,
    Status,
    idempotent,
)
from idempotent_lambda._identity import digest
from idempotent_lambda.persistence.base import MAX_STORED_DATA_BYTES
from idempotent_lambda.testing import FakeLambdaContext
from idempotent_lambda.transaction import current_transaction

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

CONFIG = IdempotencyConfig(record_format="native", event_key_jmespath="order_id")  # offloads
EVENT = {"order_id": 7}
#: About 1.3 MB of random text: about 1 MB once compressed, far over an item's 400 KB.
BIG = base64.b64encode(os.urandom(1_000_000)).decode()


@pytest.fixture
def store(
    idempotency_table: str, dynamodb_client: DynamoDBClient, s3_client: Any, bucket: str
) -> DynamoDBPersistenceLayer:
    """Return a store that offloads large results to ``bucket``."""
    return DynamoDBPersistenceLayer(
        idempotency_table,
        boto3_client=dynamodb_client,
        large_result_bucket=bucket,
        s3_client=s3_client,
    )


@contextmanager
def requests(*clients: Any) -> Iterator[list[str]]:
    """Collect ``service:operation`` of every request the clients send while the block runs."""
    sent: list[str] = []

    def count(model: Any, **kwargs: Any) -> None:
        sent.append(f"{model.service_model.service_name}:{model.name}")

    for client in clients:
        client.meta.events.register("before-call", count)
    try:
        yield sent
    finally:
        for client in clients:
            client.meta.events.unregister("before-call", count)


def handler_returning(store: DynamoDBPersistenceLayer, result: Any, runs: list[int]) -> Any:
    """Return an idempotent handler that returns ``result`` and counts its runs."""

    @idempotent(persistence_store=store, config=CONFIG, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(1)
        return result

    return handler


def raw_item(client: DynamoDBClient, table: str) -> dict[str, Any]:
    """Return the raw item of the handler's record for EVENT."""
    key = f"orders#{digest(CONFIG, EVENT['order_id'])}"
    response = client.get_item(TableName=table, Key={"id": {"S": key}}, ConsistentRead=True)
    return response["Item"]  # type: ignore[return-value]


def reference_of(item: dict[str, Any]) -> dict[str, Any]:
    """Return the S3 reference a record's data attribute holds."""
    return json.loads(item["data"]["S"])["$s3"]  # type: ignore[no-any-return]


def test_a_large_result_goes_to_s3_first_and_replays_verified(
    store: DynamoDBPersistenceLayer,
    dynamodb_client: DynamoDBClient,
    s3_client: Any,
    idempotency_table: str,
    bucket: str,
) -> None:
    """First call: 2 DynamoDB + 1 S3 put; replay: 1 DynamoDB + 1 S3 get; same result, once."""
    runs: list[int] = []
    handler = handler_returning(store, {"report": BIG}, runs)

    with requests(dynamodb_client, s3_client) as first:
        handler(EVENT, FakeLambdaContext())
    with requests(dynamodb_client, s3_client) as replay:
        replayed = handler(EVENT, FakeLambdaContext())

    assert ["dynamodb:PutItem", "s3:PutObject", "dynamodb:PutItem"] == first
    assert ["dynamodb:PutItem", "s3:GetObject"] == replay
    assert {"report": BIG} == replayed
    assert 1 == len(runs)


def test_the_record_holds_a_reference_with_the_objects_checksum(
    store: DynamoDBPersistenceLayer,
    dynamodb_client: DynamoDBClient,
    s3_client: Any,
    idempotency_table: str,
    bucket: str,
) -> None:
    """``data`` is a small S holding bucket, key, sha256 and size; the object is the zlib text."""
    handler_returning(store, BIG, [])(EVENT, FakeLambdaContext())

    item = raw_item(dynamodb_client, idempotency_table)
    reference = reference_of(item)
    body = s3_client.get_object(Bucket=bucket, Key=reference["key"])["Body"].read()

    assert Status.COMPLETED == item["status"]["S"]
    assert len(item["data"]["S"]) < 400
    assert {"bucket", "key", "sha256", "size", "encoding"} == set(reference)
    assert (bucket, "zlib") == (reference["bucket"], reference["encoding"])
    assert reference["key"].startswith("idempotency/orders/orders%23")  # inside the CDK grant
    assert reference["key"].endswith("/" + item["owner"]["S"])
    assert (hashlib.sha256(body).hexdigest(), len(body)) == (reference["sha256"], reference["size"])
    assert json.dumps(BIG) == zlib.decompress(body).decode()


def test_get_resolves_the_reference(
    store: DynamoDBPersistenceLayer, dynamodb_client: DynamoDBClient, idempotency_table: str
) -> None:
    """The store's strongly consistent read returns the result, not the reference."""
    handler_returning(store, BIG, [])(EVENT, FakeLambdaContext())
    key = f"orders#{digest(CONFIG, EVENT['order_id'])}"

    record = store.get(key)

    assert record is not None
    assert json.dumps(BIG) == record.response_data


def test_a_lower_threshold_offloads_smaller_results(
    idempotency_table: str, dynamodb_client: DynamoDBClient, s3_client: Any, bucket: str
) -> None:
    """``large_result_threshold_bytes`` makes replays of mid-sized results cheap; the prefix too."""
    store = DynamoDBPersistenceLayer(
        idempotency_table,
        boto3_client=dynamodb_client,
        large_result_bucket=bucket,
        large_result_prefix="results/",
        large_result_threshold_bytes=1024,
        s3_client=s3_client,
    )
    mid = base64.b64encode(os.urandom(6_000)).decode()
    handler = handler_returning(store, mid, [])

    handler(EVENT, FakeLambdaContext())
    small = handler_returning(store, "tiny", [])
    small({"order_id": 8}, FakeLambdaContext())

    assert mid == handler(EVENT, FakeLambdaContext())
    assert reference_of(raw_item(dynamodb_client, idempotency_table))["key"].startswith("results/")
    assert 1 == s3_client.list_objects_v2(Bucket=bucket)["KeyCount"]  # "tiny" stayed inline


def test_results_that_fit_stay_in_the_item(
    store: DynamoDBPersistenceLayer,
    dynamodb_client: DynamoDBClient,
    s3_client: Any,
    idempotency_table: str,
    bucket: str,
) -> None:
    """With a bucket, results under the threshold are stored as before (S, or B compressed)."""
    handler = handler_returning(store, {"rows": ["x" * 100] * 1000}, [])

    handler(EVENT, FakeLambdaContext())

    assert ["B"] == list(raw_item(dynamodb_client, idempotency_table)["data"])
    assert 0 == s3_client.list_objects_v2(Bucket=bucket)["KeyCount"]


@pytest.mark.parametrize("damage", ["altered", "truncated", "missing"])
def test_a_damaged_object_is_an_error_never_a_wrong_result(
    store: DynamoDBPersistenceLayer,
    dynamodb_client: DynamoDBClient,
    s3_client: Any,
    idempotency_table: str,
    bucket: str,
    damage: str,
) -> None:
    """Altered, truncated or deleted object: the replay raises and the body does not run again."""
    runs: list[int] = []
    handler = handler_returning(store, BIG, runs)
    handler(EVENT, FakeLambdaContext())
    key = reference_of(raw_item(dynamodb_client, idempotency_table))["key"]
    body = s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()
    if damage == "missing":
        s3_client.delete_object(Bucket=bucket, Key=key)
    else:
        s3_client.put_object(
            Bucket=bucket,
            Key=key,
            Body=zlib.compress(b'"forged"') if damage == "altered" else body[:-10],
        )

    with pytest.raises(IdempotencyPersistenceLayerError) as caught:
        handler(EVENT, FakeLambdaContext())

    expected = "NoSuchKey" if damage == "missing" else "checksum"
    assert expected in str(caught.value)
    assert 1 == len(runs)


def test_a_malformed_reference_is_a_store_error(
    store: DynamoDBPersistenceLayer, dynamodb_client: DynamoDBClient, idempotency_table: str
) -> None:
    """A reference without its fields reads as a corrupt item."""
    handler = handler_returning(store, BIG, [])
    handler(EVENT, FakeLambdaContext())
    item = raw_item(dynamodb_client, idempotency_table)
    item["data"] = {"S": '{"$s3":{"bucket":"b"}}'}
    dynamodb_client.put_item(TableName=idempotency_table, Item=item)  # type: ignore[arg-type]

    with pytest.raises(IdempotencyPersistenceLayerError, match="malformed S3 reference"):
        handler(EVENT, FakeLambdaContext())


def test_without_a_bucket_too_large_stays_the_documented_error(
    dynamodb_store: DynamoDBPersistenceLayer, dynamodb_client: DynamoDBClient
) -> None:
    """No bucket: `IdempotencyUnstorableResultError`, a marker record, retries raise too."""
    runs: list[int] = []
    handler = handler_returning(dynamodb_store, BIG, runs)

    with pytest.raises(IdempotencyUnstorableResultError):
        handler(EVENT, FakeLambdaContext())
    with pytest.raises(IdempotencyUnstorableResultError):
        handler(EVENT, FakeLambdaContext())
    assert 1 == len(runs)


def test_a_failing_s3_put_leaves_the_record_in_progress(
    idempotency_table: str, dynamodb_client: DynamoDBClient, s3_client: Any
) -> None:
    """No such bucket: the caller still gets its result; the record waits for its lease."""
    store = DynamoDBPersistenceLayer(
        idempotency_table,
        boto3_client=dynamodb_client,
        large_result_bucket="no-such-bucket-here",
        s3_client=s3_client,
    )

    result = handler_returning(store, BIG, [])(EVENT, FakeLambdaContext())

    assert BIG == result
    assert "IN_PROGRESS" == raw_item(dynamodb_client, idempotency_table)["status"]["S"]


def test_a_transactional_completion_offloads_too(
    store: DynamoDBPersistenceLayer,
    dynamodb_client: DynamoDBClient,
    s3_client: Any,
    idempotency_table: str,
) -> None:
    """The object is written before the transaction that commits the record and the writes."""
    orders = f"orders-{uuid.uuid4().hex[:8]}"
    dynamodb_client.create_table(
        TableName=orders,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )

    @idempotent(persistence_store=store, config=CONFIG, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> str:
        current_transaction().put(orders, {"pk": "o1"})
        return BIG

    with requests(dynamodb_client, s3_client) as first:
        handler(EVENT, FakeLambdaContext())

    assert ["dynamodb:PutItem", "s3:PutObject", "dynamodb:TransactWriteItems"] == first
    assert BIG == handler(EVENT, FakeLambdaContext())
    assert 1 == dynamodb_client.scan(TableName=orders)["Count"]
    dynamodb_client.delete_table(TableName=orders)


@pytest.mark.parametrize(
    "options",
    [
        {"large_result_prefix": "p/"},
        {"large_result_threshold_bytes": 10},
        {"large_result_bucket": ""},
        {"large_result_bucket": "b", "large_result_threshold_bytes": MAX_STORED_DATA_BYTES + 1},
        {"large_result_bucket": "b", "large_result_threshold_bytes": -1},
        {"large_result_bucket": "b", "large_result_threshold_bytes": True},
        {"large_result_bucket": "b", "large_result_prefix": 3},
    ],
)
def test_unusable_large_result_options_fail_at_construction(options: dict[str, Any]) -> None:
    """Options without a bucket, or out of range, are configuration errors."""
    with pytest.raises(IdempotencyConfigError):
        DynamoDBPersistenceLayer("table", **options)


def test_the_s3_client_is_built_on_first_use_from_the_environment(
    idempotency_table: str,
    dynamodb_client: DynamoDBClient,
    dynamodb_endpoint: str,
    s3_client: Any,
    bucket: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No ``s3_client``: one is built lazily, once, and honours ``AWS_ENDPOINT_URL_S3``."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", dynamodb_endpoint)
    store = DynamoDBPersistenceLayer(
        idempotency_table,
        boto3_client=dynamodb_client,
        large_result_bucket=bucket,
        boto_config=Config(s3={"addressing_style": "path"}),
    )
    handler = handler_returning(store, BIG, [])

    handler(EVENT, FakeLambdaContext())

    assert BIG == handler(EVENT, FakeLambdaContext())
    assert 1 == s3_client.list_objects_v2(Bucket=bucket)["KeyCount"]


def test_an_object_that_does_not_decompress_is_a_store_error(
    store: DynamoDBPersistenceLayer,
    dynamodb_client: DynamoDBClient,
    s3_client: Any,
    idempotency_table: str,
    bucket: str,
) -> None:
    """Right checksum, wrong content (not zlib): an error, not a result."""
    handler = handler_returning(store, BIG, [])
    handler(EVENT, FakeLambdaContext())
    item = raw_item(dynamodb_client, idempotency_table)
    reference = reference_of(item)
    garbage = b"not zlib at all"
    s3_client.put_object(Bucket=bucket, Key=reference["key"], Body=garbage)
    reference.update(sha256=hashlib.sha256(garbage).hexdigest(), size=len(garbage))
    item["data"] = {"S": json.dumps({"$s3": reference})}
    dynamodb_client.put_item(TableName=idempotency_table, Item=item)  # type: ignore[arg-type]

    with pytest.raises(IdempotencyPersistenceLayerError, match="does not decompress"):
        handler(EVENT, FakeLambdaContext())
