"""The DynamoDB Stream adapter against a real DynamoDB-compatible server."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from idempotent_lambda import DynamoDBPersistenceLayer
from idempotent_lambda.adapters.dynamodb_stream import (
    DynamoDBStreamRecord,
    idempotent_stream_handler,
)
from idempotent_lambda.testing import FakeLambdaContext
from tests.integration._requests import assert_requests

STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/Accounts/stream/2024-01-01T00:00:00.000"

CONTEXT_MS = 600_000  # on the wall clock: a whole batch fits in it however loaded the machine


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


def count_operations(client: Any) -> Counter[str]:
    """Count the DynamoDB operations ``client`` sends from now on, by name."""
    counts: Counter[str] = Counter()
    lock = threading.Lock()

    def count(model: Any, **_: Any) -> None:
        with lock:
            counts[model.name] += 1

    client.meta.events.register("before-call.dynamodb", count)
    return counts


def by_account(applied: list[tuple[str, Decimal]]) -> dict[str, list[int]]:
    """Return the balances applied to each account, in the order they were applied."""
    balances: dict[str, list[int]] = {}
    for account, balance in applied:
        balances.setdefault(account, []).append(int(balance))
    return balances


def test_interleaved_failures_report_from_the_checkpoint_and_redelivery_replays(
    dynamodb_store: DynamoDBPersistenceLayer, dynamodb_client: Any
) -> None:
    """Accounts a, b, c interleave; a fails at 4 and b at 8. Every record from 4 on is reported;
    Lambda's retry from 4 applies each image once, in order per account, and the records that
    completed meanwhile replay from one BatchGetItem without running or writing."""
    ledger = Ledger(fail={4, 8})
    handler = idempotent_stream_handler(persistence_store=dynamodb_store)(ledger)
    accounts = "abcabcabcabc"
    records = [change(n, account, n) for n, account in enumerate(accounts, start=1)]
    response = handler({"Records": records}, FakeLambdaContext(CONTEXT_MS))
    assert [r["dynamodb"]["SequenceNumber"] for r in records[3:]] == failed(response)
    assert {"a": [1], "b": [2, 5], "c": [3, 6, 9, 12]} == by_account(ledger.applied)

    ledger.fail.clear()
    operations = count_operations(dynamodb_client)
    assert [] == failed(handler({"Records": records[3:]}, FakeLambdaContext(CONTEXT_MS)))
    assert {"a": [1, 4, 7, 10], "b": [2, 5, 8, 11], "c": [3, 6, 9, 12]} == by_account(
        ledger.applied
    )
    # 4 records replay from the read (5 of b; 6, 9, 12 of c); each of the 5 that run (4, 7, 10
    # of a; 8, 11 of b) costs a claim and a completion.
    assert_requests(operations, completions=5, BatchGetItem=1, PutItem=5)


def test_re_read_batch_replays_every_record(dynamodb_store: DynamoDBPersistenceLayer) -> None:
    """Lambda re-reading a whole batch (say after a timeout) applies nothing twice."""
    ledger = Ledger()
    handler = idempotent_stream_handler(persistence_store=dynamodb_store)(ledger)
    event = {"Records": [change(n, "a", n * 10) for n in range(1, 6)]}
    assert [] == failed(handler(event, FakeLambdaContext(CONTEXT_MS)))
    assert [] == failed(handler(event, FakeLambdaContext(CONTEXT_MS)))
    assert [("a", Decimal(n * 10)) for n in range(1, 6)] == ledger.applied
