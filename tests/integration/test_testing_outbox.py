"""The testing kit's outbox path on moto's server: `TableStream` hands the table's real stream
records on as Lambda does, `RuleQueue` wires a rule to a queue and settles as the SQS mapping
does, and the two carry an emitted event from its record to a consumer."""

from __future__ import annotations

import json
import uuid
from typing import Any

import boto3
import pytest

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, event_keys, idempotent
from idempotent_lambda.adapters.sqs import idempotent_sqs_handler
from idempotent_lambda.outbox import emit, publish_handler
from idempotent_lambda.testing import (
    FakeLambdaContext,
    RuleQueue,
    TableStream,
    dynamodb_stream_event,
    lambda_stream_record,
)

SOURCE = "tests.kit"


@pytest.fixture
def streamed(idempotency_dynamodb_table: str) -> str:
    """The plugin's fresh table, with a NEW_IMAGE stream."""
    boto3.client("dynamodb").update_table(
        TableName=idempotency_dynamodb_table,
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
    )
    return idempotency_dynamodb_table


def put(table: str, key: str, **attributes: Any) -> None:
    boto3.client("dynamodb").put_item(TableName=table, Item={"id": {"S": key}, **attributes})


def test_records_come_in_lambda_s_shape(streamed: str) -> None:
    """Epoch seconds for the creation time, base64 text for binaries (nested too), the stream's
    ARN; the rest as GetRecords gave it, and as the event builder shapes it."""
    stream = TableStream.of_table(streamed)
    blob = {"B": b"\x00\xffbytes"}
    put(streamed, "k-1", data=blob, nested={"M": {"list": {"L": [blob]}}}, many={"BS": [b"\x01"]})

    (record,) = stream.read()

    change = record["dynamodb"]
    assert isinstance(change["ApproximateCreationDateTime"], int)
    assert "AP9ieXRlcw==" == change["NewImage"]["data"]["B"]
    assert "AP9ieXRlcw==" == change["NewImage"]["nested"]["M"]["list"]["L"][0]["B"]
    assert ["AQ=="] == change["NewImage"]["many"]["BS"]
    assert stream.stream_arn == record["eventSourceARN"]
    (built,) = dynamodb_stream_event(new_image={"id": "k-1"})["Records"]
    assert set(built) <= set(record) | {"eventSourceARN"}
    assert {"eventName": "INSERT", "Keys": {"id": {"S": "k-1"}}} == {
        "eventName": record["eventName"],
        "Keys": change["Keys"],
    }


def test_one_record_converts_alone_and_numbers_stay_numbers() -> None:
    """`lambda_stream_record` on a record already in Lambda's shape changes nothing else."""
    record = {"eventName": "INSERT", "dynamodb": {"ApproximateCreationDateTime": 1767225600}}
    assert {**record, "eventSourceARN": "arn:s"} == lambda_stream_record(record, stream_arn="arn:s")


def test_a_stream_reads_what_was_written_since_and_from_the_start_on_request(
    streamed: str,
) -> None:
    """Constructed after a write: only later writes, each once; from_start: every record."""
    put(streamed, "before")
    stream = TableStream.of_table(streamed)
    put(streamed, "after")

    keys = [r["dynamodb"]["Keys"]["id"]["S"] for r in stream.read()]
    again = stream.next_event()
    everything = TableStream.of_table(streamed, from_start=True).read()

    assert (["after"], {"Records": []}) == (keys, again)
    assert ["before", "after"] == [r["dynamodb"]["Keys"]["id"]["S"] for r in everything]


def test_a_table_without_a_stream_is_refused(idempotency_dynamodb_table: str) -> None:
    """A clear error, naming the table, instead of a KeyError on LatestStreamArn."""
    with pytest.raises(ValueError, match=f"{idempotency_dynamodb_table}.*no stream"):
        TableStream.of_table(idempotency_dynamodb_table)


def test_a_rule_queue_gets_matching_events_and_returns_failed_ones(
    idempotency_dynamodb_table: str,
) -> None:
    """The queue lets EventBridge send for that rule only; only what the pattern matches reaches
    it; settle deletes the handled message and makes the failed one visible again; close
    removes the rule and the queue."""
    events = boto3.client("events")
    entries = [
        {"Source": SOURCE, "DetailType": "Kept", "Detail": json.dumps({"n": n})} for n in (1, 2)
    ]
    entries.append({"Source": "other", "DetailType": "Kept", "Detail": "{}"})
    with RuleQueue({"source": [SOURCE]}) as queue:
        policy = boto3.client("sqs").get_queue_attributes(
            QueueUrl=queue.queue_url, AttributeNames=["Policy"]
        )["Attributes"]["Policy"]
        assert 0 == events.put_events(Entries=entries)["FailedEntryCount"]
        first = queue.receive()
        by_n = {json.loads(r["body"])["detail"]["n"]: r for r in first["Records"]}
        queue.settle(first, {"batchItemFailures": [{"itemIdentifier": by_n[2]["messageId"]}]})
        second = queue.receive()
        queue.settle(second, {"batchItemFailures": []})
        assert {"Records": []} == queue.receive()

    (statement,) = json.loads(policy)["Statement"]
    rule_arn = statement["Condition"]["ArnEquals"]["aws:SourceArn"]
    assert rule_arn.endswith(f"rule/{queue.rule_name}")
    assert ({"Service": "events.amazonaws.com"}, "sqs:SendMessage", queue.queue_arn) == (
        statement["Principal"],
        statement["Action"],
        statement["Resource"],
    )
    assert [1, 2] == sorted(by_n)
    assert {("aws:sqs", queue.queue_arn)} == {
        (r["eventSource"], r["eventSourceARN"]) for r in first["Records"]
    }
    assert [by_n[2]["messageId"]] == [r["messageId"] for r in second["Records"]]
    assert queue.rule_name not in {r["Name"] for r in events.list_rules()["Rules"]}
    assert queue.queue_url not in boto3.client("sqs").list_queues().get("QueueUrls", [])


def test_an_emitted_event_reaches_the_consumer_through_stream_bus_and_queue(
    streamed: str, idempotency_dynamodb_store: DynamoDBPersistenceLayer
) -> None:
    """The whole path, on the services' own records and messages; one effect per event."""
    order_id = str(uuid.uuid4())
    applied: list[str] = []

    @idempotent(
        persistence_store=idempotency_dynamodb_store,
        config=IdempotencyConfig(event_key_jmespath="order_id"),
    )
    def create_order(event: dict[str, Any], context: Any) -> str:
        return emit("OrderCreated", {"order_id": event["order_id"]}, source=SOURCE)

    @idempotent_sqs_handler(
        persistence_store=idempotency_dynamodb_store,
        config=IdempotencyConfig(event_key_jmespath=event_keys.OUTBOX_EVENT),
    )
    def consume(record: Any, context: Any) -> None:
        applied.append(record.json_body["detail"]["order_id"])

    stream = TableStream.of_table(streamed)
    publisher = publish_handler(idempotency_dynamodb_store)
    with RuleQueue({"source": [SOURCE], "detail-type": ["OrderCreated"]}) as queue:
        event_id = create_order({"order_id": order_id}, FakeLambdaContext())
        batch = stream.next_event()
        assert {"batchItemFailures": []} == publisher(batch, FakeLambdaContext())
        delivered = queue.receive()
        for _ in range(2):
            assert {"batchItemFailures": []} == consume(delivered, FakeLambdaContext())

    (message,) = delivered["Records"]
    assert event_id == json.loads(message["body"])["detail"]["outbox"]["id"]
    assert [order_id] == applied


def test_the_publisher_needs_the_kit_s_shape_of_getrecords_records(
    streamed: str, idempotency_dynamodb_store: DynamoDBPersistenceLayer
) -> None:
    """GetRecords' records as boto3 returns them (a datetime creation time) fail publish_handler
    as malformed, each its own record; the same records through `lambda_stream_record` publish."""

    @idempotent(
        persistence_store=idempotency_dynamodb_store,
        config=IdempotencyConfig(event_key_jmespath="order_id"),
    )
    def create_order(event: dict[str, Any], context: Any) -> str:
        return emit("OrderCreated", {"order_id": event["order_id"]}, source=SOURCE)

    create_order({"order_id": str(uuid.uuid4())}, FakeLambdaContext())
    arn = TableStream.of_table(streamed).stream_arn
    streams = boto3.client("dynamodbstreams")
    (shard,) = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    iterator = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    raw = streams.get_records(ShardIterator=iterator)["Records"]
    converted = [lambda_stream_record(record, stream_arn=arn) for record in raw]
    publisher = publish_handler(idempotency_dynamodb_store)

    refused = publisher({"Records": raw}, FakeLambdaContext())
    published = publisher({"Records": converted}, FakeLambdaContext())

    assert raw
    assert len(raw) == len(refused["batchItemFailures"])
    assert {"batchItemFailures": []} == published
