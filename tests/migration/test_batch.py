"""Batch integration in Powertools' documented style: BatchProcessor + idempotent_function."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent_function

processor = BatchProcessor(event_type=EventType.SQS)
dynamodb = DynamoDBPersistenceLayer(table_name="IdempotencyTable")
config = IdempotencyConfig(event_key_jmespath="messageId")
handled: list[str] = []


@idempotent_function(data_keyword_argument="record", config=config, persistence_store=dynamodb)
def record_handler(record: SQSRecord) -> dict[str, Any]:
    handled.append(record.message_id)
    if record.body == "poison":
        raise ValueError("cannot process this message")
    return {"message": record.body}


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    config.register_lambda_context(context)
    return process_partial_response(
        event=event, context=context, processor=processor, record_handler=record_handler
    )


def _message(message_id: str, body: str) -> dict[str, Any]:
    return {
        "messageId": message_id,
        "receiptHandle": "handle",
        "body": body,
        "attributes": {"ApproximateReceiveCount": "1"},
        "messageAttributes": {},
        "md5OfBody": "0",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
        "awsRegion": "us-east-1",
    }


@pytest.fixture(autouse=True)
def table(make_table: Callable[..., str], point_at: Any) -> None:
    """Point the app at a fresh table."""
    point_at(dynamodb, make_table())
    handled.clear()


def test_redelivered_messages_are_not_processed_again(lambda_context: Any) -> None:
    """A redelivered batch skips the messages already done and retries only the failed one."""
    event = {"Records": [_message("m-1", "a"), _message("m-2", "poison"), _message("m-3", "c")]}

    first = lambda_handler(event, lambda_context)
    again = lambda_handler(event, lambda_context)

    failed = {"batchItemFailures": [{"itemIdentifier": "m-2"}]}
    assert failed == first == again
    assert ["m-1", "m-2", "m-3", "m-2"] == handled
