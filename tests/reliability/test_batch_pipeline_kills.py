"""A Lambda killed anywhere in an ordered lane's pipeline reruns no completed record, loses none.

A real process runs a Kafka partition of 6 records against the moto server and kills itself
(``os._exit``) while claims are taken ahead, inside a body, around a completion written behind,
and while claims taken ahead are released. Redelivered once the dead invocation's leases have
ended, the batch completes every record, and a record whose completion was written before the
kill never runs again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, Status
from idempotent_lambda._claim import CLOCK_SKEW_TOLERANCE_MS
from idempotent_lambda.adapters.kafka import KafkaRecord, idempotent_kafka_handler
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests.reliability import _batch_kill_worker as worker

ROOT = Path(__file__).resolve().parents[2]


def _statuses(store: DynamoDBPersistenceLayer) -> Counter[Status]:
    view = store.with_record_format(IdempotencyConfig().record_format)
    items = view._get_client().scan(TableName=view.table_name, ConsistentRead=True)["Items"]
    return Counter(view._schema.from_item(item).status for item in items)


def _empty(store: DynamoDBPersistenceLayer) -> None:
    client = store._get_client()
    schema = client.describe_table(TableName=store.table_name)["Table"]["KeySchema"]
    names = [key["AttributeName"] for key in schema]
    for item in client.scan(TableName=store.table_name, ConsistentRead=True)["Items"]:
        client.delete_item(TableName=store.table_name, Key={n: item[n] for n in names})


def _ledger(path: Path) -> Counter[int]:
    return Counter(int(line) for line in path.read_text().split()) if path.exists() else Counter()


@pytest.mark.parametrize(
    ("point", "fail"),
    [
        ("claim:3:after", None),  # the wave of claims taken ahead, half written
        ("body:2:in", None),  # inside a body, earlier completions maybe still in flight
        ("complete:2:before", None),  # a completion behind, not written
        ("complete:2:after", None),  # a completion behind, written, the answer lost
        ("complete:5:after", None),  # the last completion, written
        ("release:2:before", 3),  # releasing the claims taken ahead after a failure
    ],
)
def test_a_killed_batch_redelivered_reruns_no_completed_record_and_loses_none(
    dynamodb_endpoint: str,
    idempotency_table: str,
    dynamodb_store: DynamoDBPersistenceLayer,
    tmp_path: Path,
    point: str,
    fail: int | None,
) -> None:
    """Kill at ``point``; the redelivery runs exactly the records not completed at the kill."""
    ledger = tmp_path / "ledger"
    args = [
        dynamodb_endpoint,
        idempotency_table,
        str(ledger),
        point,
        "-" if fail is None else str(fail),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "tests.reliability._batch_kill_worker", *args],
        cwd=ROOT,
        timeout=300,
        check=False,
        capture_output=True,
    )
    assert worker.KILLED == done.returncode, done.stderr.decode()[-2000:]
    first = _ledger(ledger)
    completed_at_kill = _statuses(dynamodb_store)[Status.COMPLETED]

    after_lease = worker.START_MS + worker.LEASE_MS + CLOCK_SKEW_TOLERANCE_MS + 1
    clock = ManualClock(after_lease)
    store = DynamoDBPersistenceLayer(
        idempotency_table, boto3_client=dynamodb_store._get_client(), clock=clock
    )
    again: list[int] = []

    @idempotent_kafka_handler(persistence_store=store, key_prefix="killed")
    def handler(record: KafkaRecord, context: Any) -> None:
        again.append(record.json_value["n"])

    answer = handler(worker.event(), FakeLambdaContext(60_000, clock=clock))
    assert [] == answer["batchItemFailures"]
    assert Counter({Status.COMPLETED: worker.RECORDS}) == _statuses(store)
    # No record completed at the kill runs again. (A completion sent just before the kill may
    # still land after the scan, so fewer records may run again, never more.)
    assert len(again) <= worker.RECORDS - completed_at_kill
    assert set(range(worker.RECORDS)) == set(first) | set(again)  # none is lost
    assert set(range(worker.RECORDS)) - set(first) <= set(again)  # those never started run
    assert again == sorted(again)  # the redelivery keeps the partition's order
    assert all(1 == count for count in Counter(again).values())


def _by_key(store: DynamoDBPersistenceLayer) -> dict[str, Any]:
    view = store.with_record_format(IdempotencyConfig().record_format)
    items = view._get_client().scan(TableName=view.table_name, ConsistentRead=True)["Items"]
    return {r.idempotency_key: r for r in (view._schema.from_item(item) for item in items)}


@pytest.mark.parametrize("point", ["batch:1:before", "batch:1:after"])
def test_a_lambda_killed_before_its_completions_written_together_reruns_them_only_after_the_lease(
    dynamodb_endpoint: str,
    idempotency_table: str,
    dynamodb_store: DynamoDBPersistenceLayer,
    tmp_path: Path,
    point: str,
) -> None:
    """Killed around a group of completions (``BatchWriteItem``), a record whose body ran and
    whose completion was not written stays IN_PROGRESS under the dead invocation's lease, as
    one killed before its conditional completion does: a redelivery within the lease runs
    nothing and reports the partition from there; after the lease, exactly the records not
    completed run, once each, in order. Nothing is lost."""
    ledger = tmp_path / "ledger"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.reliability._batch_kill_worker",
            *[dynamodb_endpoint, idempotency_table, str(ledger), point, "-"],
        ],
        cwd=ROOT,
        timeout=300,
        check=False,
        capture_output=True,
    )
    assert worker.KILLED == done.returncode, done.stderr.decode()[-2000:]
    first = _ledger(ledger)
    at_kill = _by_key(dynamodb_store)
    assert worker.RECORDS == len(at_kill)  # every record was claimed ahead
    completed = {json.loads(r.response_data)["n"] for r in at_kill.values() if r.response_data}
    if point.endswith("before"):
        assert set() == completed  # killed before the first group went out
        assert first  # after at least one body ran
    pending = [r for r in at_kill.values() if r.status is Status.IN_PROGRESS]
    assert worker.RECORDS - len(completed) == len(pending)
    lease_end = worker.START_MS + worker.LEASE_MS  # the dead invocation's deadline
    assert all(lease_end == r.in_progress_expiry_timestamp for r in pending)

    def redeliver(now_ms: int) -> tuple[list[int], list[Any]]:
        clock = ManualClock(now_ms)
        store = DynamoDBPersistenceLayer(
            idempotency_table, boto3_client=dynamodb_store._get_client(), clock=clock
        )
        ran: list[int] = []

        @idempotent_kafka_handler(persistence_store=store, key_prefix="killed")
        def handler(record: KafkaRecord, context: Any) -> None:
            ran.append(record.json_value["n"])

        answer = handler(worker.event(), FakeLambdaContext(60_000, clock=clock))
        return ran, answer["batchItemFailures"]

    within, reported = redeliver(lease_end - 1)
    assert [] == within  # nothing reruns inside the dead invocation's lease
    first_pending = min(set(range(worker.RECORDS)) - completed, default=worker.RECORDS)
    assert worker.RECORDS - first_pending == len(reported)  # the partition from there on

    again, reported = redeliver(lease_end + CLOCK_SKEW_TOLERANCE_MS + 1)
    assert [] == reported
    assert Counter({Status.COMPLETED: worker.RECORDS}) == _statuses(dynamodb_store)
    assert sorted(set(range(worker.RECORDS)) - completed) == again  # once each, in order
    assert set(range(worker.RECORDS)) == set(first) | set(again)  # none is lost
