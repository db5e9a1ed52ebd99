"""Test kit for users of idempotent_lambda: events, a Lambda context, a clock you move, tables.

A unit test with the bundled pytest fixtures (the plugin loads automatically):

```python
def test_retry_replays(idempotency_store, lambda_context):
    handler = make_handler(idempotency_store)
    event = api_gateway_http_event(body={"sku": "A1"})
    first = handler(event, lambda_context)
    assert first["body"] == handler(event, lambda_context)["body"]
```

Move time instead of sleeping: `idempotency_clock.advance(seconds=3601)` expires records and
shrinks `lambda_context`'s remaining time alike.

The event builders (`api_gateway_rest_event`, `api_gateway_http_event`, `sqs_event`,
`dynamodb_stream_event`, `kinesis_event`, `kafka_event`) each return a valid event when called
with no arguments; keyword arguments set what a test cares about. Identifiers are fresh on
every call and sequence numbers and offsets keep growing, as on a real queue or stream: to
model a retry, send the same event again, or pin the id. A batch builder makes one record from
its keywords, or one per entry of `records=` (a dict of the same keywords, overriding them for
that record): `sqs_event(records=[{"body": {"n": 1}}, {"body": {"n": 2}}])`.

The outbox's whole path runs on the local server too: `TableStream` reads a table's real
stream (`GetRecords`) and hands its records on as Lambda's event source mapping does
(`lambda_stream_record` converts one), and `RuleQueue` wires an EventBridge rule to an SQS
queue whose messages it hands to a consumer as Lambda's SQS event.
"""

from __future__ import annotations

from idempotent_lambda.persistence.dynamodb._operator import create_idempotency_table
from idempotent_lambda.testing._events import (
    SQSMessageFields,
    StreamRecordFields,
    dynamodb_stream_event,
    sqs_event,
)
from idempotent_lambda.testing._http_events import api_gateway_http_event, api_gateway_rest_event
from idempotent_lambda.testing._kinesis_kafka_events import (
    KafkaRecordFields,
    KinesisRecordFields,
    kafka_event,
    kinesis_event,
)
from idempotent_lambda.testing._kit import (
    FakeLambdaContext,
    ManualClock,
    local_dynamodb,
    serialise_moto_writes,
)
from idempotent_lambda.testing._outbox import RuleQueue, TableStream, lambda_stream_record

__all__ = [
    "FakeLambdaContext",
    "KafkaRecordFields",
    "KinesisRecordFields",
    "ManualClock",
    "RuleQueue",
    "SQSMessageFields",
    "StreamRecordFields",
    "TableStream",
    "api_gateway_http_event",
    "api_gateway_rest_event",
    "create_idempotency_table",
    "dynamodb_stream_event",
    "kafka_event",
    "kinesis_event",
    "lambda_stream_record",
    "local_dynamodb",
    "serialise_moto_writes",
    "sqs_event",
]
