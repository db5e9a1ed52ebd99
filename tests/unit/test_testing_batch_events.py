"""The batch event builders of `idempotent_lambda.testing`: SQS and DynamoDB Streams events that
their adapters accept, Kinesis and Kafka events in AWS's documented shapes, each keyword where
AWS puts it."""

from __future__ import annotations

import base64
import hashlib
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from idempotent_lambda import InMemoryPersistenceLayer
from idempotent_lambda.adapters.dynamodb_stream import (
    DynamoDBStreamRecord,
    idempotent_stream_handler,
)
from idempotent_lambda.adapters.sqs import SQSMessageAttribute, SQSRecord, idempotent_sqs_handler
from idempotent_lambda.testing import (
    FakeLambdaContext,
    dynamodb_stream_event,
    kafka_event,
    kinesis_event,
    sqs_event,
)
from tests.unit._event_shapes import paths, types_by_path

EVENTS = Path(__file__).parents[1] / "events"

#: Lambda's documented Kinesis event (docs.aws.amazon.com/lambda/latest/dg/with-kinesis.html).
AWS_KINESIS_EVENT = {
    "Records": [
        {
            "kinesis": {
                "kinesisSchemaVersion": "1.0",
                "partitionKey": "1",
                "sequenceNumber": "49590338271490256608559692538361571095921575989136588898",
                "data": "SGVsbG8sIHRoaXMgaXMgYSB0ZXN0Lg==",
                "approximateArrivalTimestamp": 1545084650.987,
            },
            "eventSource": "aws:kinesis",
            "eventVersion": "1.0",
            "eventID": "shardId-000000000006:"
            "49590338271490256608559692538361571095921575989136588898",
            "eventName": "aws:kinesis:record",
            "invokeIdentityArn": "arn:aws:iam::123456789012:role/lambda-role",
            "awsRegion": "us-east-2",
            "eventSourceARN": "arn:aws:kinesis:us-east-2:123456789012:stream/lambda-stream",
        }
    ]
}
#: Lambda's documented Amazon MSK event (docs.aws.amazon.com/lambda/latest/dg/with-msk.html).
AWS_MSK_EVENT = {
    "eventSource": "aws:kafka",
    "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/vpc-2priv-2pub/"
    "751d2973-a626-431c-9d4e-d7975eb44dd7-2",
    "bootstrapServers": "b-2.demo-cluster-1.a1bcde.c1.kafka.us-east-1.amazonaws.com:9092,"
    "b-1.demo-cluster-1.a1bcde.c1.kafka.us-east-1.amazonaws.com:9092",
    "records": {
        "mytopic-0": [
            {
                "topic": "mytopic",
                "partition": 0,
                "offset": 15,
                "timestamp": 1545084650987,
                "timestampType": "CREATE_TIME",
                "key": "abcDEFghiJKLmnoPQRstuVWXyz1234==",
                "value": "SGVsbG8sIHRoaXMgaXMgYSB0ZXN0Lg==",
                "headers": [{"headerKey": [104, 101, 97, 100, 101, 114, 86, 97, 108, 117, 101]}],
            }
        ]
    },
}


def sample(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text())  # type: ignore[no-any-return]


def sqs_handler(store: InMemoryPersistenceLayer, seen: list[SQSRecord]) -> Any:
    @idempotent_sqs_handler(persistence_store=store)
    def handler(record: SQSRecord, context: Any) -> Any:
        seen.append(record)
        return record.json_body

    return handler


def stream_handler(store: InMemoryPersistenceLayer, seen: list[DynamoDBStreamRecord]) -> Any:
    @idempotent_stream_handler(persistence_store=store)
    def handler(record: DynamoDBStreamRecord, context: Any) -> None:
        seen.append(record)

    return handler


# ------------------------------------------------------------------------------------------ SQS
def test_sqs_default_event_has_the_fields_of_aws_sample() -> None:
    """With no arguments: one message with the fields of AWS's sample (tests/events)."""
    standard = sqs_event(message_attributes={"myAttribute": "myValue"})
    assert paths(sample("sqs_standard.json")) == paths(standard)
    fifo = sqs_event(message_group_id="g-1")
    assert paths(sample("sqs_fifo.json")) == paths(fifo)
    assert fifo["Records"][0]["eventSourceARN"].endswith(".fifo")


def test_sqs_default_event_runs_once_and_replays(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The SQS adapter accepts the default event; redelivered, the message replays."""
    seen: list[SQSRecord] = []
    handler = sqs_handler(idempotency_store, seen)
    event = sqs_event()
    assert {"batchItemFailures": []} == handler(event, lambda_context)
    assert {"batchItemFailures": []} == handler(event, lambda_context)
    assert 1 == len(seen)
    assert {} == seen[0].json_body


def test_sqs_keywords_reach_the_typed_record(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Body, message id, attributes and message attributes arrive where the adapter reads them."""
    seen: list[SQSRecord] = []
    event = sqs_event(
        body={"order_id": 7},
        message_id="m-1",
        attributes={"AWSTraceHeader": "Root=1-abc"},
        message_attributes={"tenant": "acme", "blob": b"\x01", "n": 3},
        receive_count=2,
        queue_arn="arn:aws:sqs:eu-west-1:111122223333:payments",
    )
    sqs_handler(idempotency_store, seen)(event, lambda_context)
    (record,) = seen
    assert ("m-1", '{"order_id": 7}', {"order_id": 7}) == (
        record.message_id,
        record.body,
        record.json_body,
    )
    assert 2 == record.approximate_receive_count
    assert "Root=1-abc" == record.attributes["AWSTraceHeader"]
    assert {
        "tenant": SQSMessageAttribute("String", string_value="acme"),
        "blob": SQSMessageAttribute("Binary", binary_value=b"\x01"),
        "n": SQSMessageAttribute("Number", string_value="3"),
    } == dict(record.message_attributes)
    raw = event["Records"][0]
    assert "eu-west-1" == raw["awsRegion"]
    assert hashlib.md5(raw["body"].encode(), usedforsecurity=False).hexdigest() == raw["md5OfBody"]


def test_sqs_fifo_attributes() -> None:
    """A message group adds the FIFO attributes; sequence numbers grow within the batch."""
    event = sqs_event(message_group_id="g-1", records=[{"body": "a"}, {"body": "b"}])
    first, second = (record["attributes"] for record in event["Records"])
    assert "g-1" == first["MessageGroupId"] == second["MessageGroupId"]
    assert int(first["SequenceNumber"]) < int(second["SequenceNumber"])
    assert first["MessageDeduplicationId"] != second["MessageDeduplicationId"]


def test_sqs_records_override_the_keywords(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """`records=` makes one message per entry; keywords apply to entries that do not set them."""
    event = sqs_event(
        receive_count=3,
        records=[{"body": {"n": 1}}, {"body": {"n": 2}, "message_id": "m-2", "receive_count": 1}],
    )
    first, second = event["Records"]
    assert ["3", "1"] == [r["attributes"]["ApproximateReceiveCount"] for r in event["Records"]]
    assert "m-2" == second["messageId"] != first["messageId"]
    seen: list[SQSRecord] = []
    sqs_handler(idempotency_store, seen)(event, lambda_context)
    assert [{"n": 1}, {"n": 2}] == sorted((r.json_body for r in seen), key=lambda b: b["n"])


def test_sqs_the_same_message_id_twice_runs_once(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A keyword shared by every record models a duplicate delivery inside one batch."""
    seen: list[SQSRecord] = []
    event = sqs_event(message_id="m-1", records=[{}, {}])
    assert {"batchItemFailures": []} == sqs_handler(idempotency_store, seen)(event, lambda_context)
    assert 1 == len(seen)


def test_sqs_empty_records_is_an_empty_batch() -> None:
    """`records=[]` gives a batch without messages."""
    assert {"Records": []} == sqs_event(records=[])


# ------------------------------------------------------------------------------ DynamoDB Streams
def test_stream_default_event_has_the_fields_of_aws_sample() -> None:
    """With no arguments: the INSERT of `{"id": "1"}`, with the fields of AWS's sample."""
    expected = {p for p in paths(sample("dynamodb_stream_update.json")) if "Image." not in p}
    built = dynamodb_stream_event()
    assert {p for p in paths(built) if "Image." not in p and "Keys." not in p} == {
        p for p in expected if "Keys." not in p and "OldImage" not in p
    }
    record = built["Records"][0]
    assert "INSERT" == record["eventName"]
    assert {"id": {"S": "1"}} == record["dynamodb"]["Keys"] == record["dynamodb"]["NewImage"]


def test_stream_default_event_runs_once_and_replays(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The stream adapter accepts the default event; re-read, the record replays."""
    seen: list[DynamoDBStreamRecord] = []
    handler = stream_handler(idempotency_store, seen)
    event = dynamodb_stream_event()
    assert {"batchItemFailures": []} == handler(event, lambda_context)
    assert {"batchItemFailures": []} == handler(event, lambda_context)
    assert [{"id": "1"}] == [record.keys for record in seen]


def test_stream_images_are_serialised_as_dynamodb_json(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Plain Python images become DynamoDB JSON and come back from the adapter as they were."""
    new = {"id": "u-1", "n": 3, "price": 9.5, "tags": {"a"}, "blob": b"\x00", "more": [1, None]}
    old = {"id": "u-1", "n": 2}
    event = dynamodb_stream_event(new_image=new, old_image=old)
    change = event["Records"][0]["dynamodb"]
    assert {"id": {"S": "u-1"}} == change["Keys"]
    assert {"N": "9.5"} == change["NewImage"]["price"]
    assert {"SS": ["a"]} == change["NewImage"]["tags"]
    assert {"B": "AA=="} == change["NewImage"]["blob"]
    assert {"L": [{"N": "1"}, {"NULL": True}]} == change["NewImage"]["more"]
    seen: list[DynamoDBStreamRecord] = []
    stream_handler(idempotency_store, seen)(event, lambda_context)
    (record,) = seen
    assert "MODIFY" == record.event_name
    assert {**new, "n": Decimal(3), "price": Decimal("9.5"), "more": [Decimal(1), None]} == (
        record.new_image
    )
    assert {"id": "u-1", "n": Decimal(2)} == record.old_image


@pytest.mark.parametrize(
    ("images", "expected"),
    [
        ({"new_image": {"id": "1"}}, "INSERT"),
        ({"new_image": {"id": "1"}, "old_image": {"id": "1"}}, "MODIFY"),
        ({"old_image": {"id": "1"}}, "REMOVE"),
        ({"event_name": "REMOVE"}, "REMOVE"),
        ({"ttl_removal": True}, "REMOVE"),
    ],
)
def test_stream_event_name_follows_the_images(images: dict[str, Any], expected: str) -> None:
    """Without `event_name`, the images say what changed."""
    assert expected == dynamodb_stream_event(**images)["Records"][0]["eventName"]


def test_stream_keys(idempotency_store: InMemoryPersistenceLayer) -> None:
    """Keys default to the image's `id`; other key attributes are named with `keys=`."""
    event = dynamodb_stream_event(keys={"pk": "u#1", "sk": 2}, new_image={"pk": "u#1", "sk": 2})
    assert {"pk": {"S": "u#1"}, "sk": {"N": "2"}} == event["Records"][0]["dynamodb"]["Keys"]
    with pytest.raises(ValueError, match="keys="):
        dynamodb_stream_event(new_image={"pk": "u#1"})


def test_stream_ttl_removal(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A TTL removal carries the service's `userIdentity`, as in AWS's sample."""
    event = dynamodb_stream_event(ttl_removal=True, old_image={"id": "s-1", "expires": 1})
    assert paths(sample("dynamodb_stream_ttl_removal.json")) - {
        "Records.[].dynamodb.Keys.pk",
        "Records.[].dynamodb.Keys.pk.S",
        "Records.[].dynamodb.OldImage.pk",
        "Records.[].dynamodb.OldImage.pk.S",
        "Records.[].dynamodb.OldImage.expires_at",
        "Records.[].dynamodb.OldImage.expires_at.N",
    } <= paths(event)
    seen: list[DynamoDBStreamRecord] = []
    stream_handler(idempotency_store, seen)(event, lambda_context)
    assert [True] == [record.is_ttl_removal for record in seen]
    with pytest.raises(ValueError, match="REMOVE"):
        dynamodb_stream_event(ttl_removal=True, event_name="INSERT")


@pytest.mark.parametrize(
    ("view", "images"),
    [
        ("KEYS_ONLY", set()),
        ("NEW_IMAGE", {"NewImage"}),
        ("OLD_IMAGE", {"OldImage"}),
        ("NEW_AND_OLD_IMAGES", {"NewImage", "OldImage"}),
    ],
)
def test_stream_view_type_carries_only_its_images(view: str, images: set[str]) -> None:
    """The stream view type decides which images a record carries."""
    event = dynamodb_stream_event(
        new_image={"id": "1", "v": 2}, old_image={"id": "1", "v": 1}, stream_view_type=view
    )
    change = event["Records"][0]["dynamodb"]
    assert images == {"NewImage", "OldImage"} & set(change)
    assert view == change["StreamViewType"]


def test_stream_records_are_in_sequence_order(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Records get growing sequence numbers, from one event to the next too."""
    event = dynamodb_stream_event(
        records=[{"new_image": {"id": "1", "v": 1}}, {"new_image": {"id": "1", "v": 2}}]
    )
    later = dynamodb_stream_event()
    numbers = [int(r["dynamodb"]["SequenceNumber"]) for r in event["Records"] + later["Records"]]
    assert sorted(numbers) == numbers
    assert len(set(numbers)) == 3
    seen: list[DynamoDBStreamRecord] = []
    stream_handler(idempotency_store, seen)(event, lambda_context)
    assert [1, 2] == [record.new_image["v"] for record in seen if record.new_image]
    pinned = dynamodb_stream_event(sequence_number="100", event_id="e-1")["Records"][0]
    assert ("100", "e-1") == (pinned["dynamodb"]["SequenceNumber"], pinned["eventID"])


# -------------------------------------------------------------------------------------- Kinesis
def test_kinesis_default_event_matches_aws_documented_event() -> None:
    """With no arguments: AWS's documented fields, with the same JSON types."""
    assert types_by_path(AWS_KINESIS_EVENT) == types_by_path(kinesis_event())


@pytest.mark.parametrize(
    ("data", "expected"),
    [(b"\x00\xff", b"\x00\xff"), ("héllo", "héllo".encode()), ({"a": 1}, b'{"a": 1}')],
)
def test_kinesis_data_is_base64(data: Any, expected: bytes) -> None:
    """Data given as bytes, str or a dict is base64-encoded as Kinesis delivers it."""
    record = kinesis_event(data=data)["Records"][0]
    assert expected == base64.b64decode(record["kinesis"]["data"], validate=True)


def test_kinesis_records_and_identifiers() -> None:
    """Partition keys, sequence numbers and `eventID` (shard:sequence) where AWS puts them."""
    event = kinesis_event(
        partition_key="customer-1",
        records=[{"data": "a"}, {"data": "b", "partition_key": "customer-2"}],
        stream_arn="arn:aws:kinesis:eu-west-1:111122223333:stream/clicks",
        shard_id="shardId-000000000007",
    )
    first, second = event["Records"]
    assert ["customer-1", "customer-2"] == [r["kinesis"]["partitionKey"] for r in event["Records"]]
    assert int(first["kinesis"]["sequenceNumber"]) < int(second["kinesis"]["sequenceNumber"])
    assert f"shardId-000000000007:{first['kinesis']['sequenceNumber']}" == first["eventID"]
    assert "eu-west-1" == first["awsRegion"]
    assert "arn:aws:kinesis:eu-west-1:111122223333:stream/clicks" == second["eventSourceARN"]
    pinned = kinesis_event(sequence_number="42")["Records"][0]
    assert "42" == pinned["kinesis"]["sequenceNumber"]
    assert pinned["eventID"].endswith(":42")


# ---------------------------------------------------------------------------------------- Kafka
def test_kafka_default_event_matches_aws_documented_event() -> None:
    """With no arguments and a key: AWS's documented MSK fields, with the same JSON types."""
    documented = types_by_path(AWS_MSK_EVENT)
    built = kafka_event(key="k", headers={"headerKey": "headerValue"})
    assert {p.replace("mytopic-0", "orders-0"): t for p, t in documented.items()} == (
        types_by_path(built)
    )
    assert "aws:kafka" == built["eventSource"]
    assert "key" not in kafka_event()["records"]["orders-0"][0]


def test_kafka_payloads_and_headers() -> None:
    """Key and value are base64; each header is a list of the value's bytes."""
    record = kafka_event(
        key={"id": 1},
        value=b"\x00raw",
        headers=[("trace", "t-1"), ("trace", b"\xff")],
        timestamp=1_700_000_000_000,
        offset=15,
    )["records"]["orders-0"][0]
    assert b'{"id": 1}' == base64.b64decode(record["key"], validate=True)
    assert b"\x00raw" == base64.b64decode(record["value"], validate=True)
    assert [{"trace": list(b"t-1")}, {"trace": [255]}] == record["headers"]
    assert (15, 1_700_000_000_000, "CREATE_TIME") == (
        record["offset"],
        record["timestamp"],
        record["timestampType"],
    )


def test_kafka_records_are_grouped_by_topic_partition() -> None:
    """Records go under `"topic-partition"`, in order; offsets grow within a partition."""
    event = kafka_event(
        topic="payments",
        records=[{"value": "a"}, {"value": "b", "partition": 1}, {"value": "c"}],
        cluster_arn="arn:aws:kafka:eu-west-1:111122223333:cluster/pay/abc-1",
    )
    assert ["payments-0", "payments-1"] == list(event["records"])
    zero = event["records"]["payments-0"]
    assert [b"a", b"c"] == [base64.b64decode(r["value"]) for r in zero]
    assert zero[0]["offset"] < zero[1]["offset"]
    assert {"topic": "payments", "partition": 1} == {
        name: event["records"]["payments-1"][0][name] for name in ("topic", "partition")
    }
    assert "arn:aws:kafka:eu-west-1:111122223333:cluster/pay/abc-1" == event["eventSourceArn"]
