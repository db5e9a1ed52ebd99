"""The DynamoDB Stream adapter against a real DynamoDB-compatible server."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from idempotent_lambda import DynamoDBPersistenceLayer
from idempotent_lambda.adapters.dynamodb_stream import (
    DynamoDBStreamRecord,
    idempotent_stream_handler,
)
from idempotent_lambda.testing import FakeLambdaContext

STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/Accounts/stream/2024-01-01T00:00:00.000"


def change(sequence: int, account: str, balance: int) -> dict[str, Any]:
    """Return a MODIFY record of ``account`` moving to ``balance``."""
    return {
        "eventID": f"event-{sequence}",
        "eventName": "MODIFY",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": 1704067200,
            "Keys": {"account": {"S": account}},
            "NewImage": {"account": {"S": account}, "balance": {"N": str(balance)}},
            "SequenceNumber": f"{sequence:021d}",
            "SizeBytes": 40,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        },
        "eventSourceARN": STREAM_ARN,
    }


def failed(response: Mapping[str, Any]) -> list[str]:
    """Return the reported identifiers, in order."""
    return [failure["itemIdentifier"] for failure in response["batchItemFailures"]]


class Ledger:
    """Applies balances per account, in the order it sees them; fails chosen sequences."""

    def __init__(self, fail: set[int] | None = None) -> None:
        self.fail = fail or set()
        self.applied: list[tuple[str, Decimal]] = []

    def __call__(self, record: DynamoDBStreamRecord, context: Any) -> None:
        if int(record.sequence_number) in self.fail:
            raise RuntimeError("downstream unavailable")
        assert record.new_image is not None
        self.applied.append((record.new_image["account"], record.new_image["balance"]))


def test_stream_stops_at_the_first_failure_and_keeps_per_item_order(
    dynamodb_store: DynamoDBPersistenceLayer,
) -> None:
    """A failure stops the batch; Lambda's retry from it applies every image once, in order."""
    ledger = Ledger(fail={3})
    handler = idempotent_stream_handler(persistence_store=dynamodb_store)(ledger)
    records = [
        change(1, "a", 10),
        change(2, "b", 5),
        change(3, "a", 20),
        change(4, "a", 30),
        change(5, "b", 6),
    ]
    response = handler({"Records": records}, FakeLambdaContext(30_000))
    assert [r["dynamodb"]["SequenceNumber"] for r in records[2:]] == failed(response)
    assert [("a", Decimal(10)), ("b", Decimal(5))] == ledger.applied

    ledger.fail.clear()
    assert [] == failed(handler({"Records": records[2:]}, FakeLambdaContext(30_000)))
    expected = [("a", 10), ("b", 5), ("a", 20), ("a", 30), ("b", 6)]
    assert [(account, Decimal(balance)) for account, balance in expected] == ledger.applied


def test_re_read_batch_replays_every_record(dynamodb_store: DynamoDBPersistenceLayer) -> None:
    """Lambda re-reading a whole batch (say after a timeout) applies nothing twice."""
    ledger = Ledger()
    handler = idempotent_stream_handler(persistence_store=dynamodb_store)(ledger)
    event = {"Records": [change(n, "a", n * 10) for n in range(1, 6)]}
    assert [] == failed(handler(event, FakeLambdaContext(30_000)))
    assert [] == failed(handler(event, FakeLambdaContext(30_000)))
    assert [("a", Decimal(n * 10)) for n in range(1, 6)] == ledger.applied
