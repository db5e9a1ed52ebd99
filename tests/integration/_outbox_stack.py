"""The outbox's real parts on moto's server: a table with a stream, a bus, a rule, a queue.

`OutboxStack` reads the table's stream with a ``dynamodbstreams`` client (GetRecords) and hands
the records to a handler in the shape Lambda delivers them; the bus's rule targets an SQS queue
that `OutboxStack.received` reads, as a consumer fed by EventBridge would.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from idempotent_lambda._outbox_format import is_outbox_key
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.persistence.dynamodb._operator import create_idempotency_table
from idempotent_lambda.testing import lambda_stream_record

SOURCE = "tests.outbox"


def client(service: str, endpoint: str) -> Any:
    """Return a client of ``service`` on moto's server, with dummy credentials."""
    import boto3

    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@dataclass
class OutboxStack:
    """One table with its stream, one bus whose rule feeds one queue."""

    endpoint: str
    table: str
    stream_arn: str
    bus: str
    queue_url: str
    store: DynamoDBPersistenceLayer
    events: Any
    _iterators: dict[str, str | None] = field(default_factory=dict)

    def stream_records(self, *, from_start: bool = False) -> list[dict[str, Any]]:
        """Return the stream records written since the last call, as Lambda delivers them.

        ``from_start``: every record the stream holds instead.
        """
        if from_start:
            self._iterators.clear()
        streams = client("dynamodbstreams", self.endpoint)
        shards = streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]["Shards"]
        records: list[dict[str, Any]] = []
        for shard in shards:
            shard_id = shard["ShardId"]
            if shard_id not in self._iterators:
                self._iterators[shard_id] = streams.get_shard_iterator(
                    StreamArn=self.stream_arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
                )["ShardIterator"]
            iterator = self._iterators[shard_id]
            if iterator is None:
                continue
            response = streams.get_records(ShardIterator=iterator)
            self._iterators[shard_id] = response.get("NextShardIterator")
            records.extend(
                lambda_stream_record(r, stream_arn=self.stream_arn) for r in response["Records"]
            )
        return records

    def received(self) -> list[dict[str, Any]]:
        """Return (and delete) every message on the queue: the events EventBridge delivered."""
        sqs = client("sqs", self.endpoint)
        messages: list[dict[str, Any]] = []
        while True:
            batch = sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=10,
                WaitTimeSeconds=0,
                AttributeNames=["All"],
            ).get("Messages", [])
            if not batch:
                return messages
            for message in batch:
                sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
            messages.extend(batch)

    def business_key(self, name: str) -> dict[str, str]:
        """Return the key of a business item named ``name`` in the table's key layout."""
        schema = self.store._schema
        if schema.sort_key_attr:
            return {schema.key_attr: "orders", schema.sort_key_attr: name}
        return {schema.key_attr: name}

    def outbox_items(self) -> list[dict[str, Any]]:
        """Return every outbox item of the table (a Scan)."""
        ddb = client("dynamodb", self.endpoint)
        items = ddb.scan(TableName=self.table, ConsistentRead=True)["Items"]
        key_attr = self.store._schema.idempotency_key_attr
        return [i for i in items if is_outbox_key(i.get(key_attr, {}).get("S"))]


def make_stack(
    endpoint: str, *, view: str = "NEW_IMAGE", static_pk_value: str | None = None
) -> OutboxStack:
    """Create a table with a stream, a bus, a rule on `SOURCE` and its queue.

    With ``static_pk_value`` the table is keyed ``pk``/``sk`` and the store is composite.
    """
    name = f"outbox-{uuid.uuid4().hex[:10]}"
    ddb = client("dynamodb", endpoint)
    keys: dict[str, Any] = {}
    if static_pk_value is not None:
        keys = {"key_attr": "pk", "sort_key_attr": "sk"}
    create_idempotency_table(ddb, table_name=name, **keys)
    ddb.update_table(
        TableName=name, StreamSpecification={"StreamEnabled": True, "StreamViewType": view}
    )
    stream_arn = ddb.describe_table(TableName=name)["Table"]["LatestStreamArn"]
    sqs = client("sqs", endpoint)
    queue_url = sqs.create_queue(QueueName=name)["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    events = client("events", endpoint)
    events.create_event_bus(Name=name)
    events.put_rule(
        Name=f"{name}-rule", EventBusName=name, EventPattern=json.dumps({"source": [SOURCE]})
    )
    events.put_targets(
        Rule=f"{name}-rule", EventBusName=name, Targets=[{"Id": "queue", "Arn": queue_arn}]
    )
    store = DynamoDBPersistenceLayer(
        name, boto3_client=ddb, static_pk_value=static_pk_value, **keys
    )
    return OutboxStack(endpoint, name, stream_arn, name, queue_url, store, events)


@pytest.fixture
def stack(dynamodb_endpoint: str) -> OutboxStack:
    """Return a fresh `OutboxStack` on the session's moto server."""
    return make_stack(dynamodb_endpoint)


def sqs_lambda_event(messages: list[dict[str, Any]], queue_url: str) -> dict[str, Any]:
    """Turn received SQS messages into the event Lambda hands an SQS-triggered function."""
    queue_arn = "arn:aws:sqs:us-east-1:123456789012:" + queue_url.rsplit("/", 1)[1]
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": {},
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": "us-east-1",
            }
            for m in messages
        ]
    }


class ThrottleAllButFirst:
    """Make moto's EventBridge answer the next ``times`` PutEvents as a throttled service does.

    A botocore ``before-send`` hook on the real client: the request really goes to moto with
    its first entry only, and the answer reports that entry's result and ``ThrottlingException``
    for every other entry, which were therefore never put. Later requests pass untouched.
    """

    def __init__(self, events_client: Any, times: int = 1) -> None:
        from botocore.httpsession import URLLib3Session

        self.left = times
        self.requests = 0
        self._http = URLLib3Session()
        events_client.meta.events.register("before-send.events.PutEvents", self._before_send)

    def _before_send(self, request: Any, **_: Any) -> Any:
        from botocore.awsrequest import AWSPreparedRequest, AWSResponse

        self.requests += 1
        if self.left <= 0:
            return None
        self.left -= 1
        sent = json.loads(request.body)
        entries = sent["Entries"]
        body = json.dumps({**sent, "Entries": entries[:1]}).encode()
        headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
        headers["Content-Length"] = str(len(body))
        first = self._http.send(
            AWSPreparedRequest("POST", request.url, headers, body, stream_output=False)
        )
        answered = json.loads(first.content)["Entries"]
        throttled = {"ErrorCode": "ThrottlingException", "ErrorMessage": "Rate exceeded"}
        result = {
            "FailedEntryCount": len(entries) - 1,
            "Entries": answered + [throttled] * (len(entries) - 1),
        }

        class Raw:
            def __init__(self, data: bytes) -> None:
                self._data = data

            def stream(self, **_: Any) -> Any:
                yield self._data

        data = json.dumps(result).encode()
        return AWSResponse(
            request.url, 200, {"Content-Type": "application/x-amz-json-1.1"}, Raw(data)
        )
