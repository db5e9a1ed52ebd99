"""The outbox's whole path on a local server: the table's stream read as Lambda's event source
mapping reads it, and an EventBridge rule that feeds an SQS queue; re-exported by
`idempotent_lambda.testing`.

Both talk to real endpoints through boto3 (moto's server in tests: `local_dynamodb`), so the
records and messages a handler gets are the ones the services produced, in the shape Lambda
delivers them.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping
from datetime import datetime
from types import TracebackType
from typing import Any

__all__ = ["RuleQueue", "TableStream", "lambda_stream_record"]

#: The image parts of a stream record that carry DynamoDB JSON.
_IMAGES = ("Keys", "NewImage", "OldImage")


def lambda_stream_record(record: Mapping[str, Any], *, stream_arn: str) -> dict[str, Any]:
    """Return one record of DynamoDB Streams' `GetRecords` as Lambda's event carries it.

    boto3 hands `ApproximateCreationDateTime` back as a `datetime` and binary attributes as
    `bytes`; the event source mapping sends JSON: epoch seconds, base64 text. It also adds the
    stream's `eventSourceARN`. Everything else is passed on as it is.

    Args:
        record: A record of a `dynamodbstreams` client's `get_records` answer.
        stream_arn: The stream it was read from.
    """
    change = dict(record["dynamodb"])
    created = change.get("ApproximateCreationDateTime")
    if isinstance(created, datetime):
        change["ApproximateCreationDateTime"] = int(created.timestamp())
    for name in _IMAGES:
        if name in change:
            change[name] = _base64_binaries(change[name])
    return {**record, "dynamodb": change, "eventSourceARN": stream_arn}


def _base64_binaries(value: Any) -> Any:
    """Return DynamoDB JSON with every `bytes` (a `B` or `BS` value) as base64 text."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Mapping):
        return {key: _base64_binaries(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_base64_binaries(item) for item in value]
    return value


class TableStream:
    """A table's DynamoDB Stream, read with `GetRecords` as Lambda's event source mapping does.

    Hand `next_event` to a stream handler (`outbox.publish_handler`, `idempotent_stream_handler`)
    to run it on the records the table's real writes produced, instead of records made up.
    Like the mapping it checkpoints sequence numbers, not iterators: each read asks for a fresh
    iterator after the last record it returned, in every shard (moto replaces a stream's shard
    when it rolls back a cancelled `TransactWriteItems`; an iterator kept across that would
    miss every later record).

    Args:
        stream_arn: The stream (a table's `LatestStreamArn`).
        client: A `dynamodbstreams` client; one from the environment by default.
        from_start: Read every record the stream holds; by default only those written after
            construction.
    """

    def __init__(self, stream_arn: str, *, client: Any = None, from_start: bool = False) -> None:
        if client is None:
            import boto3

            client = boto3.client("dynamodbstreams")
        self._client = client
        self.stream_arn = stream_arn
        self._after: dict[str, str | None] = {}
        if not from_start:
            self.read()  # skip what is there already

    @classmethod
    def of_table(
        cls,
        table_name: str,
        *,
        dynamodb_client: Any = None,
        client: Any = None,
        from_start: bool = False,
    ) -> TableStream:
        """Return the reader of `table_name`'s stream.

        Args:
            table_name: The table.
            dynamodb_client: A `dynamodb` client to find the stream with; one from the
                environment by default.
            client: A `dynamodbstreams` client to read it with; one by default.
            from_start: As for the constructor.

        Raises:
            ValueError: The table has no stream enabled.
        """
        if dynamodb_client is None:
            import boto3

            dynamodb_client = boto3.client("dynamodb")
        table = dynamodb_client.describe_table(TableName=table_name)["Table"]
        if not table.get("StreamSpecification", {}).get("StreamEnabled"):
            raise ValueError(
                f"table {table_name!r} has no stream: enable one (StreamViewType NEW_IMAGE or "
                "NEW_AND_OLD_IMAGES for the outbox) before reading it"
            )
        return cls(table["LatestStreamArn"], client=client, from_start=from_start)

    def read(self) -> list[dict[str, Any]]:
        """Return the records written since the last read, in Lambda's shape, in stream order."""
        records: list[dict[str, Any]] = []
        for shard in self._shards():  # a shard opened since is read from its start
            last = self._after.setdefault(shard, None)
            position: dict[str, str] = (
                {"ShardIteratorType": "TRIM_HORIZON"}
                if last is None
                else {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": last}
            )
            iterator = self._client.get_shard_iterator(
                StreamArn=self.stream_arn, ShardId=shard, **position
            )["ShardIterator"]
            while iterator:
                page = self._client.get_records(ShardIterator=iterator, Limit=1000)
                if not page["Records"]:
                    break
                records.extend(
                    lambda_stream_record(record, stream_arn=self.stream_arn)
                    for record in page["Records"]
                )
                self._after[shard] = page["Records"][-1]["dynamodb"]["SequenceNumber"]
                iterator = page.get("NextShardIterator", "")  # none: the shard is closed
        records.sort(key=lambda record: int(record["dynamodb"]["SequenceNumber"]))
        return records

    def next_event(self) -> dict[str, Any]:
        """Return the records written since the last read as one Lambda event.

        The event is `{"Records": [...]}`, as the event source mapping delivers a batch.
        """
        return {"Records": self.read()}

    def _shards(self) -> list[str]:
        description = self._client.describe_stream(StreamArn=self.stream_arn)
        return [shard["ShardId"] for shard in description["StreamDescription"]["Shards"]]


class RuleQueue:
    """An SQS queue fed by an EventBridge rule: what a consumer of published events reads.

    Creates the queue (with the policy that lets EventBridge send for that rule only, as a
    deployed queue needs), the rule on `event_bus_name` with `event_pattern`, and the rule's
    target; `close` (or leaving a `with` block) deletes them. `receive` hands the messages
    EventBridge delivered to a consumer as Lambda's SQS event source mapping does, and `settle`
    deletes those the consumer did not report in `batchItemFailures`; the failed ones come
    back at the next `receive` (Lambda would wait out the queue's visibility timeout first).

    Args:
        event_pattern: The rule's event pattern, e.g. `{"source": ["shop.orders"]}`.
        event_bus_name: The bus the rule is on (the publisher's).
        events_client: An `events` client; one from the environment by default.
        sqs_client: An `sqs` client; one from the environment by default.

    Attributes:
        queue_url: The queue's URL.
        queue_arn: The queue's ARN (the records' `eventSourceARN`).
        rule_name: The rule's name.
    """

    def __init__(
        self,
        event_pattern: Mapping[str, Any],
        *,
        event_bus_name: str = "default",
        events_client: Any = None,
        sqs_client: Any = None,
    ) -> None:
        import boto3

        self._events = events_client or boto3.client("events")
        self._sqs = sqs_client or boto3.client("sqs")
        self._bus = event_bus_name
        name = f"outbox-consumer-{uuid.uuid4().hex[:12]}"
        self.queue_url: str = self._sqs.create_queue(QueueName=name)["QueueUrl"]
        self.queue_arn: str = self._sqs.get_queue_attributes(
            QueueUrl=self.queue_url, AttributeNames=["QueueArn"]
        )["Attributes"]["QueueArn"]
        self.rule_name = name
        rule_arn = self._events.put_rule(
            Name=name, EventBusName=event_bus_name, EventPattern=json.dumps(event_pattern)
        )["RuleArn"]
        self._sqs.set_queue_attributes(
            QueueUrl=self.queue_url, Attributes={"Policy": _rule_may_send(self.queue_arn, rule_arn)}
        )
        self._events.put_targets(
            Rule=name, EventBusName=event_bus_name, Targets=[{"Id": "queue", "Arn": self.queue_arn}]
        )
        self._receipts: dict[str, str] = {}

    def receive(self) -> dict[str, Any]:
        """Return every message visible now as one SQS event, `{"Records": [...]}`.

        The messages stay invisible for the queue's visibility timeout, as for a consumer that
        is running; `settle` deletes the handled ones. No message: `{"Records": []}`.
        """
        records: list[dict[str, Any]] = []
        while True:
            messages = self._sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=10,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
                WaitTimeSeconds=0,
            ).get("Messages", [])
            if not messages:
                return {"Records": records}
            for message in messages:
                self._receipts[message["MessageId"]] = message["ReceiptHandle"]
                records.append(self._lambda_record(message))

    def settle(self, event: Mapping[str, Any], response: Mapping[str, Any] | None) -> None:
        """Delete the messages of `event` that the consumer's `response` did not fail.

        The failed ones are made visible again at once, for the next `receive`.

        Args:
            event: An event `receive` returned.
            response: The consumer's answer (`{"batchItemFailures": [...]}`); None, as from a
                handler that raised, fails every message.
        """
        if response is None:
            failed = {record["messageId"] for record in event["Records"]}
        else:
            failed = {item["itemIdentifier"] for item in response.get("batchItemFailures", [])}
        for record in event["Records"]:
            receipt = self._receipts.pop(record["messageId"])
            if record["messageId"] in failed:
                self._sqs.change_message_visibility(
                    QueueUrl=self.queue_url, ReceiptHandle=receipt, VisibilityTimeout=0
                )
            else:
                self._sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=receipt)

    def close(self) -> None:
        """Delete the rule's target, the rule and the queue."""
        self._events.remove_targets(Rule=self.rule_name, EventBusName=self._bus, Ids=["queue"])
        self._events.delete_rule(Name=self.rule_name, EventBusName=self._bus)
        self._sqs.delete_queue(QueueUrl=self.queue_url)

    def __enter__(self) -> RuleQueue:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _lambda_record(self, message: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": message.get("Attributes", {}),
            "messageAttributes": {
                name: _lambda_message_attribute(value)
                for name, value in message.get("MessageAttributes", {}).items()
            },
            "md5OfBody": message["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": self.queue_arn,
            "awsRegion": self.queue_arn.split(":")[3],
        }


def _rule_may_send(queue_arn: str, rule_arn: str) -> str:
    """Return the queue policy that lets EventBridge send on behalf of that rule only."""
    statement = {
        "Effect": "Allow",
        "Principal": {"Service": "events.amazonaws.com"},
        "Action": "sqs:SendMessage",
        "Resource": queue_arn,
        "Condition": {"ArnEquals": {"aws:SourceArn": rule_arn}},
    }
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


def _lambda_message_attribute(value: Mapping[str, Any]) -> dict[str, Any]:
    """Return a `ReceiveMessage` message attribute as Lambda's SQS event spells it."""
    attribute: dict[str, Any] = {"stringListValues": [], "binaryListValues": []}
    for name, item in value.items():
        attribute[name[0].lower() + name[1:]] = _base64_binaries(item)
    return attribute
