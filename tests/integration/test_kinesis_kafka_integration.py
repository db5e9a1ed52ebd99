"""The Kinesis and Kafka adapters against a real DynamoDB-compatible server."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from idempotent_lambda import DynamoDBPersistenceLayer
from idempotent_lambda.adapters.kafka import KafkaRecord, idempotent_kafka_handler
from idempotent_lambda.adapters.kinesis import KinesisRecord, idempotent_kinesis_handler
from idempotent_lambda.testing import (
    FakeLambdaContext,
    KafkaRecordFields,
    KinesisRecordFields,
    kafka_event,
    kinesis_event,
)
from tests.integration._requests import assert_requests

if TYPE_CHECKING:
    pass

CONTEXT_MS = 600_000  # on the wall clock: a whole batch fits in it however loaded the machine


class Ledger:
    """Applies ``(key, n)`` in the order it sees them; fails the ``n`` it is told to."""

    def __init__(self, fail: set[int]) -> None:
        self.fail = fail
        self.applied: list[tuple[str, int]] = []
        self._lock = threading.Lock()

    def apply(self, key: str, n: int) -> None:
        """Record one application, or raise for a failing ``n``."""
        if n in self.fail:
            raise RuntimeError("downstream unavailable")
        with self._lock:
            self.applied.append((key, n))

    def by_key(self) -> dict[str, list[int]]:
        """Return the ``n`` applied per key, in order."""
        found: dict[str, list[int]] = {}
        for key, n in self.applied:
            found.setdefault(key, []).append(n)
        return found


def test_kinesis_interleaved_failures_report_from_the_checkpoint_and_the_retry_replays(
    dynamodb_store: DynamoDBPersistenceLayer, requests: Counter[str]
) -> None:
    """Partition keys a, b, c interleave; a fails at 4 and b at 8. Every record from 4 on is
    reported; Lambda's retry from 4 applies each record once, in order per key, and the
    records that completed past the checkpoint replay from one BatchGetItem."""
    ledger = Ledger(fail={4, 8})

    @idempotent_kinesis_handler(persistence_store=dynamodb_store)
    def handler(record: KinesisRecord, context: Any) -> None:
        ledger.apply(record.partition_key, record.json_data["n"])

    fields = [
        KinesisRecordFields(partition_key=k, data={"n": n}) for n, k in enumerate("abc" * 4, 1)
    ]
    batch = kinesis_event(records=fields)["Records"]
    response = handler({"Records": batch}, FakeLambdaContext(CONTEXT_MS))
    numbers = [record["kinesis"]["sequenceNumber"] for record in batch]
    assert numbers[3:] == [failure["itemIdentifier"] for failure in response["batchItemFailures"]]
    assert {"a": [1], "b": [2, 5], "c": [3, 6, 9, 12]} == ledger.by_key()

    ledger.fail.clear()
    requests.clear()
    lowest = min(int(failure["itemIdentifier"]) for failure in response["batchItemFailures"])
    retry = [record for record in batch if int(record["kinesis"]["sequenceNumber"]) >= lowest]
    again = handler({"Records": retry}, FakeLambdaContext(CONTEXT_MS))
    assert {"batchItemFailures": []} == again
    assert {"a": [1, 4, 7, 10], "b": [2, 5, 8, 11], "c": [3, 6, 9, 12]} == ledger.by_key()
    # 4 replay from the read (5 of b; 6, 9, 12 of c); the 5 that run cost a claim and a completion.
    assert_requests(requests, completions=5, BatchGetItem=1, PutItem=5)


def partition(event: Mapping[str, Any], number: int) -> list[dict[str, Any]]:
    """Return the records of partition ``number`` of topic orders."""
    return list(event["records"][f"orders-{number}"])


def test_kafka_failure_stops_its_partition_and_the_retry_of_that_partition_runs_once(
    dynamodb_store: DynamoDBPersistenceLayer, requests: Counter[str]
) -> None:
    """Partition 1 fails at its second record: that record and the rest of partition 1 are
    reported; partitions 0 and 2 finish. The retry of partition 1 runs each record once."""
    ledger = Ledger(fail={4})

    @idempotent_kafka_handler(persistence_store=dynamodb_store)
    def handler(record: KafkaRecord, context: Any) -> None:
        ledger.apply(f"p{record.partition}", record.json_value["n"])

    fields = [KafkaRecordFields(partition=n % 3, value={"n": n}) for n in range(12)]
    event = kafka_event(records=fields)
    response = handler(event, FakeLambdaContext(CONTEXT_MS))
    tail = partition(event, 1)[1:]
    assert [{"partition": "orders-1", "offset": r["offset"]} for r in tail] == [
        failure["itemIdentifier"] for failure in response["batchItemFailures"]
    ]
    assert {"p0": [0, 3, 6, 9], "p1": [1], "p2": [2, 5, 8, 11]} == ledger.by_key()
    # No first-delivery hint: one read; 9 records ran (a claim and a completion each), 1 failed
    # (claim, release), and the 2 after it were claimed ahead, then released unrun, together.
    assert_requests(
        requests,
        completions=9,
        released_together=True,
        BatchGetItem=1,
        PutItem=12,
        DeleteItem=1,
    )

    ledger.fail.clear()
    requests.clear()
    retry = {**event, "records": {"orders-1": tail}}
    assert {"batchItemFailures": []} == handler(retry, FakeLambdaContext(CONTEXT_MS))
    assert [1, 4, 7, 10] == ledger.by_key()["p1"]
    assert_requests(requests, completions=3, BatchGetItem=1, PutItem=3)
    again = handler(event, FakeLambdaContext(CONTEXT_MS))  # the whole batch, once more
    assert {"batchItemFailures": []} == again
    assert 12 == len(ledger.applied)
