"""The five batch sources, redelivering as AWS does (issue 41, "Lambda").

- SQS standard: a batch's messages become visible again after the visibility timeout, unless
  the answer reported them done; a crashed batch comes back whole.
- SQS FIFO: the same, and a message group delivers nothing while one of its messages is in
  flight, and only in order.
- DynamoDB Streams and Kinesis: one shard, read from its checkpoint; the answer's first failure
  (or a crash: the whole batch) is where the next batch starts.
- Kafka: each partition has its checkpoint, moved by the answer per partition.

Each record carries its name (``r3``) and its lane (the group, item, partition key or
partition) in its payload, so the body and the checker know which record ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from idempotent_lambda.adapters.dynamodb_stream import idempotent_stream_handler
from idempotent_lambda.adapters.kafka import idempotent_kafka_handler
from idempotent_lambda.adapters.kinesis import idempotent_kinesis_handler
from idempotent_lambda.adapters.sqs import idempotent_sqs_handler
from idempotent_lambda.testing import (
    KafkaRecordFields,
    KinesisRecordFields,
    SQSMessageFields,
    StreamRecordFields,
    dynamodb_stream_event,
    kafka_event,
    kinesis_event,
    sqs_event,
)

#: The batch sources, and whether their lanes are ordered.
ORDERED = {"sqs": False, "fifo": True, "stream": True, "kinesis": True, "kafka": True}
DECORATORS = {
    "sqs": idempotent_sqs_handler,
    "fifo": idempotent_sqs_handler,
    "stream": idempotent_stream_handler,
    "kinesis": idempotent_kinesis_handler,
    "kafka": idempotent_kafka_handler,
}
FIFO_QUEUE = "arn:aws:sqs:us-east-1:123456789012:orders.fifo"


@dataclass
class Rec:
    """One record of the source."""

    name: str
    lane: str
    index: int
    receives: int = 0
    visible_at_ms: int = 0
    done: bool = False


class Source:
    """A batch source: what it delivers next, and how an answer moves it."""

    def __init__(self, kind: str, count: int, lanes: int, timeout_ms: int) -> None:
        self.kind = kind
        self.timeout_ms = timeout_ms
        self.records = [Rec(f"r{n + 1}", f"L{n % lanes}", n) for n in range(count)]
        self.checkpoints: dict[str, int] = {}  # kafka: partition -> next index

    @property
    def ordered(self) -> bool:
        return ORDERED[self.kind]

    def take(self, now_ms: int, batch: int) -> list[Rec]:
        """Return the next batch Lambda would deliver (and mark it in flight)."""
        undone = [r for r in self.records if not r.done]
        if self.kind == "sqs":
            taken = [r for r in undone if r.visible_at_ms <= now_ms][:batch]
        elif self.kind == "fifo":
            taken = []
            for lane in dict.fromkeys(r.lane for r in undone):
                group = [r for r in undone if r.lane == lane]
                if group[0].visible_at_ms <= now_ms and all(
                    r.visible_at_ms <= now_ms for r in group
                ):
                    taken.extend(group)
            taken = sorted(taken, key=lambda r: r.index)[:batch]
        else:  # a shard or partitions read from checkpoints: nothing in flight twice
            if any(r.visible_at_ms > now_ms for r in undone):
                return []
            taken = undone[:batch]
        for record in taken:
            record.receives += 1
            record.visible_at_ms = now_ms + self.timeout_ms
        return taken

    def settle(self, taken: list[Rec], failed: set[str] | None, now_ms: int) -> None:
        """Apply an answer (``failed`` None: the invocation died or raised)."""
        if failed is None:
            if self.kind in ("stream", "kinesis", "kafka"):
                for record in taken:
                    record.visible_at_ms = now_ms  # read again from the checkpoint
            return
        if self.kind in ("sqs", "fifo"):
            for record in taken:
                if record.name not in failed:
                    record.done = True
            return
        if self.kind == "kafka":
            lanes = dict.fromkeys(r.lane for r in taken)
            for lane in lanes:
                in_lane = [r for r in taken if r.lane == lane]
                self._advance(in_lane, failed, now_ms)
            return
        self._advance(taken, failed, now_ms)

    def _advance(self, taken: list[Rec], failed: set[str], now_ms: int) -> None:
        stop = False
        for record in taken:
            stop = stop or record.name in failed
            if not stop:
                record.done = True
            record.visible_at_ms = now_ms

    def event(self, taken: list[Rec]) -> dict[str, Any]:
        """Return the event Lambda hands the function for ``taken``."""
        if self.kind in ("sqs", "fifo"):
            group = self.kind == "fifo"
            messages = [
                SQSMessageFields(
                    body={"name": r.name, "lane": r.lane},
                    message_id=r.name,
                    receive_count=r.receives,
                    message_group_id=r.lane if group else None,
                )
                for r in taken
            ]
            return sqs_event(records=messages, queue_arn=FIFO_QUEUE if group else None)
        if self.kind == "stream":
            changes = [
                StreamRecordFields(
                    keys={"pk": r.lane},
                    new_image={"pk": r.lane, "name": r.name},
                    event_name="MODIFY",
                    sequence_number=str(1000 + r.index),
                )
                for r in taken
            ]
            return dynamodb_stream_event(records=changes)
        if self.kind == "kinesis":
            entries = [
                KinesisRecordFields(
                    data={"name": r.name, "lane": r.lane},
                    partition_key=r.lane,
                    sequence_number=str(1000 + r.index),
                )
                for r in taken
            ]
            return kinesis_event(records=entries)
        records = [
            KafkaRecordFields(
                value={"name": r.name, "lane": r.lane},
                partition=int(r.lane[1:]),
                offset=r.index,
            )
            for r in taken
        ]
        return kafka_event(records=records)

    def failed_names(self, answer: dict[str, Any], taken: list[Rec]) -> set[str]:
        """Return the names of the records the answer reports failed."""
        names = set()
        for failure in answer.get("batchItemFailures", []):
            ident = failure["itemIdentifier"]
            for record in taken:
                if ident in (record.name, str(1000 + record.index)) or (
                    isinstance(ident, dict)
                    and ident.get("offset") == record.index
                    and str(ident.get("partition", "")).endswith(f"-{record.lane[1:]}")
                ):
                    names.add(record.name)
        return names

    @staticmethod
    def name_of(record: Any) -> tuple[str, str]:
        """Return a delivered record's name and lane, as the body sees it."""
        for attribute in ("json_body", "json_data", "json_value", "new_image"):
            payload = getattr(record, attribute, None)
            if isinstance(payload, dict) and "name" in payload:
                return payload["name"], payload.get("lane") or payload.get("pk") or ""
        raise AssertionError(f"no name in {type(record).__name__}")
