"""Kinesis and Amazon MSK (Kafka) events shaped as AWS sends them, for tests; re-exported by
`idempotent_lambda.testing`.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from idempotent_lambda.testing._events import ACCOUNT, each_record, next_position, payload_bytes

__all__ = ["KafkaRecordFields", "KinesisRecordFields", "kafka_event", "kinesis_event"]

KINESIS_FIRST = 49590338271490256608559692538361571095921575989136588898
KINESIS_STREAM = f"arn:aws:kinesis:us-east-1:{ACCOUNT}:stream/orders"
KAFKA_CLUSTER = (
    f"arn:aws:kafka:us-east-1:{ACCOUNT}:cluster/orders/751d2973-a626-431c-9d4e-d7975eb44dd7-2"
)
KAFKA_BROKERS = (
    "b-1.orders.a1bcde.c1.kafka.us-east-1.amazonaws.com:9092,"
    "b-2.orders.a1bcde.c1.kafka.us-east-1.amazonaws.com:9092"
)


class KinesisRecordFields(TypedDict, total=False):
    """One record of `kinesis_event(records=...)`: its keywords for that record."""

    data: Any
    partition_key: str | None
    sequence_number: str | None


KafkaHeaders = Mapping[str, str | bytes] | Sequence[tuple[str, str | bytes]]


class KafkaRecordFields(TypedDict, total=False):
    """One record of `kafka_event(records=...)`: its keywords for that record."""

    value: Any
    key: Any
    headers: KafkaHeaders | None
    topic: str
    partition: int
    offset: int | None
    timestamp: int | None


def kinesis_event(
    *,
    data: Any = "{}",
    partition_key: str | None = None,
    sequence_number: str | None = None,
    records: Sequence[KinesisRecordFields] | None = None,
    stream_arn: str = KINESIS_STREAM,
    shard_id: str = "shardId-000000000000",
) -> dict[str, Any]:
    """Return a Kinesis Data Streams event; each record's data is base64-encoded.

    Args:
        data: The record's data: `bytes`, a `str` (UTF-8) or anything else as JSON.
        partition_key: The partition key; a fresh UUID by default.
        sequence_number: The record's sequence number; by default one past the last one made.
        records: One entry per record, each overriding the keywords above for its record.
        stream_arn: The stream (`eventSourceARN`).
        shard_id: The shard the batch comes from (part of each `eventID`).
    """
    fields = each_record(
        records,
        KinesisRecordFields(
            data=data, partition_key=partition_key, sequence_number=sequence_number
        ),
    )
    region = stream_arn.split(":")[3]
    built = []
    for entry in fields:
        number = entry["sequence_number"] or next_position(KINESIS_FIRST)
        built.append(
            {
                "kinesis": {
                    "kinesisSchemaVersion": "1.0",
                    "partitionKey": entry["partition_key"] or str(uuid.uuid4()),
                    "sequenceNumber": number,
                    "data": base64.b64encode(payload_bytes(entry["data"])).decode(),
                    "approximateArrivalTimestamp": round(time.time(), 3),
                },
                "eventSource": "aws:kinesis",
                "eventVersion": "1.0",
                "eventID": f"{shard_id}:{number}",
                "eventName": "aws:kinesis:record",
                "invokeIdentityArn": f"arn:aws:iam::{ACCOUNT}:role/orders-function",
                "awsRegion": region,
                "eventSourceARN": stream_arn,
            }
        )
    return {"Records": built}


def kafka_event(
    *,
    value: Any = "{}",
    key: Any = None,
    headers: KafkaHeaders | None = None,
    topic: str = "orders",
    partition: int = 0,
    offset: int | None = None,
    timestamp: int | None = None,
    records: Sequence[KafkaRecordFields] | None = None,
    cluster_arn: str = KAFKA_CLUSTER,
    bootstrap_servers: str = KAFKA_BROKERS,
) -> dict[str, Any]:
    """Return an Amazon MSK event: records grouped under `"topic-partition"`, key and value
    base64-encoded, each header a list of byte values.

    Args:
        value: The record's value: `bytes`, a `str` (UTF-8) or anything else as JSON.
        key: The record's key, encoded like `value`; None sends a record without a key.
        headers: Header names and values (`str` as UTF-8 or `bytes`), a mapping or pairs.
        topic: The record's topic.
        partition: The record's partition.
        offset: The record's offset; by default one past the last one made.
        timestamp: `CREATE_TIME` in epoch milliseconds; now by default.
        records: One entry per record, each overriding the keywords above for its record.
        cluster_arn: The cluster (`eventSourceArn`).
        bootstrap_servers: The cluster's brokers, comma-separated.
    """
    fields = each_record(
        records,
        KafkaRecordFields(
            value=value,
            key=key,
            headers=headers,
            topic=topic,
            partition=partition,
            offset=offset,
            timestamp=timestamp,
        ),
    )
    grouped: dict[str, list[dict[str, Any]]] = {}
    for entry in fields:
        record: dict[str, Any] = {
            "topic": entry["topic"],
            "partition": entry["partition"],
            "offset": int(next_position(0)) if entry["offset"] is None else entry["offset"],
            "timestamp": entry["timestamp"] or time.time_ns() // 1_000_000,
            "timestampType": "CREATE_TIME",
        }
        if entry["key"] is not None:
            record["key"] = base64.b64encode(payload_bytes(entry["key"])).decode()
        record["value"] = base64.b64encode(payload_bytes(entry["value"])).decode()
        record["headers"] = _kafka_headers(entry["headers"])
        grouped.setdefault(f"{entry['topic']}-{entry['partition']}", []).append(record)
    return {
        "eventSource": "aws:kafka",
        "eventSourceArn": cluster_arn,
        "bootstrapServers": bootstrap_servers,
        "records": grouped,
    }


def _kafka_headers(headers: KafkaHeaders | None) -> list[dict[str, list[int]]]:
    pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
    return [{name: list(payload_bytes(value))} for name, value in pairs]
