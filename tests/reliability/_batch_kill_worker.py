"""A Kafka batch worker that kills itself (``os._exit``) at a chosen point of the pipeline.

Run as ``python -m tests.reliability._batch_kill_worker ENDPOINT TABLE LEDGER POINT``, where
POINT is ``op:nth:when``: ``claim:3:after`` dies once the 3rd claim is written, ``body:2:in``
inside record 2's body, ``complete:2:before`` as the 2nd completion starts, ``batch:1:before``
as the first group of completions is sent together (``BatchWriteItem``). ``fail=N`` makes
record N raise. Each body appends its record number to LEDGER before anything else.

The ``batch`` points run with a client whose requests are bounded to 16 s, retries included, so
the 60 s leases leave room for completions written together; the others keep botocore's
defaults (minutes), under which every completion is a conditional ``PutItem``.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

import boto3
from botocore.config import Config

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyRecord
from idempotent_lambda.adapters.kafka import KafkaRecord, idempotent_kafka_handler
from idempotent_lambda.persistence.base import ClaimOutcome
from idempotent_lambda.testing import FakeLambdaContext, KafkaRecordFields, ManualClock, kafka_event

#: The worker's frozen clock and its invocation's remaining time: its leases end at START + LEASE.
START_MS = 1_767_225_600_000
LEASE_MS = 60_000
RECORDS = 6
KILLED = 9


def event() -> dict[str, Any]:
    """Return the batch: one partition of `RECORDS` records, the same in every process."""
    built = kafka_event(
        records=[KafkaRecordFields(partition=0, value={"n": n}) for n in range(RECORDS)]
    )
    built["eventSourceArn"] = "arn:aws:kafka:us-east-1:123456789012:cluster/orders/fixed-1"
    for records in built["records"].values():
        for offset, record in enumerate(records):
            record["timestamp"] = START_MS  # the builder stamps the wall clock
            record["offset"] = offset  # and counts offsets across the events it builds
    return built


def ledger_entry(path: str, n: int) -> None:
    """Append ``n`` to the ledger file, on disk before the body goes on."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{n}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


class DyingStore(DynamoDBPersistenceLayer):
    """The DynamoDB store, killing the process at the ``nth`` call of ``op``."""

    def __init__(self, table: str, client: Any, op: str, nth: int, when: str) -> None:
        super().__init__(table, boto3_client=client, clock=ManualClock(START_MS))
        self.op, self.nth, self.when = op, nth, when
        self.seen = 0
        self.lock = threading.Lock()

    def _around(self, op: str, call: Any) -> Any:
        if op != self.op:
            return call()
        with self.lock:
            self.seen += 1
            mine = self.seen == self.nth
        if mine and self.when == "before":
            os._exit(KILLED)
        result = call()
        if mine:
            os._exit(KILLED)
        return result

    def claim(
        self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int
    ) -> ClaimOutcome:
        """Claim, maybe dying around it."""
        return self._around(
            "claim",
            lambda: super(DyingStore, self).claim(
                record, now_ms=now_ms, lease_cutoff_ms=lease_cutoff_ms
            ),
        )

    def complete(self, record: IdempotencyRecord) -> bool:
        """Complete, maybe dying around it."""
        return self._around("complete", lambda: super(DyingStore, self).complete(record))

    def put_completed(
        self, records: Sequence[IdempotencyRecord], *, send_by_ms: int | None = None
    ) -> list[IdempotencyRecord]:
        """Complete a group together, maybe dying around it."""
        return self._around(  # type: ignore[no-any-return]
            "batch",
            lambda: super(DyingStore, self).put_completed(records, send_by_ms=send_by_ms),
        )

    def delete_claims(
        self, idempotency_keys: Sequence[str], *, send_by_ms: int | None = None
    ) -> list[str]:
        """Release claims together, maybe dying around it."""
        return self._around(  # type: ignore[no-any-return]
            "release",
            lambda: super(DyingStore, self).delete_claims(idempotency_keys, send_by_ms=send_by_ms),
        )

    def release(self, idempotency_key: str, owner: str) -> bool:
        """Release, maybe dying around it."""
        return self._around(
            "release", lambda: super(DyingStore, self).release(idempotency_key, owner)
        )


def main(endpoint: str, table: str, ledger: str, point: str, fail: int | None) -> None:
    """Run the batch once; the process dies at ``point``."""
    op, nth, when = point.split(":")
    config = None
    if op == "batch":
        retries: Any = {"total_max_attempts": 2, "mode": "standard"}
        config = Config(connect_timeout=2, read_timeout=3, retries=retries)
    client = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1", config=config)
    store = DyingStore(table, client, op, int(nth), when)

    @idempotent_kafka_handler(persistence_store=store, key_prefix="killed", time_safety_margin_ms=0)
    def handler(record: KafkaRecord, context: Any) -> dict[str, int]:
        n = record.json_value["n"]
        ledger_entry(ledger, n)
        if op == "body" and n == int(nth):
            os._exit(KILLED)
        if n == fail:
            raise RuntimeError("refused")
        return {"n": n}

    handler(event(), FakeLambdaContext(LEASE_MS, clock=store.clock))


if __name__ == "__main__":
    endpoint, table, ledger, point, fail = sys.argv[1:6]
    main(endpoint, table, ledger, point, None if fail == "-" else int(fail))
