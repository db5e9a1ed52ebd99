"""Idempotent processing of Amazon MSK and self-managed Kafka batches with partial responses.

Decorate a handler of one record; the result is the Lambda handler for the whole batch:

```python
from idempotent_lambda import DynamoDBPersistenceLayer
from idempotent_lambda.adapters.kafka import KafkaRecord, idempotent_kafka_handler

store = DynamoDBPersistenceLayer("IdempotencyTable")

@idempotent_kafka_handler(persistence_store=store)
def handler(record: KafkaRecord, context) -> None:
    ship(record.json_value)
```

The event source mapping must enable `ReportBatchItemFailures` (Kafka mappings offer it in
provisioned mode). The batch handler returns Lambda's partial batch response for Kafka, each
failed record named by its topic-partition and offset:
`{"batchItemFailures": [{"itemIdentifier": {"partition": "orders-0", "offset": 15}}, ...]}`.
An `async def` record handler works too. Bad options raise `IdempotencyConfigError` at
decoration time.

- **Key**: the cluster (`eventSourceArn`; `bootstrapServers` for self-managed Kafka, which has
  no ARN), the topic, the partition and the offset, so a record Lambda sends again replays.
  `event_key_jmespath` reads the raw record instead, for instance
  `powertools_json(powertools_base64(value)).order_id`; the key stays scoped to the cluster
  unless `source_scope="shared"`.
- **Order**: the records of one topic-partition run in offset order; once one fails (malformed,
  key error, in progress elsewhere, store error, handler raised), it and the partition's later
  records are reported and the later ones do not start. Other partitions go on concurrently
  (`max_concurrency`).
- A redelivered batch is read at once when the store can (`BatchReadStore`): Kafka gives no
  hint of a first delivery, so every batch is read. An event without a `records` map of lists
  raises `MalformedEventError`.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, cast

from idempotent_lambda._entry import keyword_only
from idempotent_lambda.adapters._batch_exports import (
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_TIME_SAFETY_MARGIN_MS,
    BatchOptions,
    batch_adapter,
)
from idempotent_lambda.adapters._batch_source import BatchSource, Probe, base64_field, time_field
from idempotent_lambda.exceptions import MalformedEventError, MalformedRecordError

if TYPE_CHECKING:
    from idempotent_lambda.config import IdempotencyConfig
    from idempotent_lambda.persistence.protocol import PersistenceStore

__all__ = [
    "DEFAULT_MAX_CONCURRENCY",
    "DEFAULT_TIME_SAFETY_MARGIN_MS",
    "BatchOptions",
    "KafkaBatchHandler",
    "KafkaBatchItemFailure",
    "KafkaItemIdentifier",
    "KafkaPartialBatchResponse",
    "KafkaRecord",
    "MalformedEventError",
    "MalformedRecordError",
    "idempotent_kafka_handler",
]

_NOT_PARSED: Any = object()


class KafkaItemIdentifier(TypedDict):
    """A Kafka record in the answer: ``"{topic}-{partition}"`` and its offset."""

    partition: str
    offset: int


class KafkaBatchItemFailure(TypedDict):
    """One Kafka record for Lambda to retry."""

    itemIdentifier: KafkaItemIdentifier


class KafkaPartialBatchResponse(TypedDict):
    """What a Kafka batch handler returns (needs ``ReportBatchItemFailures`` on the mapping)."""

    batchItemFailures: list[KafkaBatchItemFailure]


KafkaBatchHandler = Callable[[Any, Any], KafkaPartialBatchResponse]
"""A Lambda handler ``handler(event, context)`` for a Kafka event source."""


@dataclass(frozen=True, slots=True, eq=False)
class KafkaRecord:
    """One Kafka record as the record handler receives it.

    Attributes:
        topic: The topic.
        partition: The partition in the topic (records of one run in offset order).
        offset: The record's offset in its partition.
        timestamp: The record's timestamp (UTC), when given.
        timestamp_type: ``CREATE_TIME`` or ``LOG_APPEND_TIME``, when given.
        key: The record's key, base64-decoded; None for a record without one.
        value: The record's value, base64-decoded; None for a tombstone.
        headers: ``(name, value)`` pairs in the order sent (a name may repeat).
        raw: The record exactly as Lambda delivered it (what ``event_key_jmespath`` reads).
    """

    topic: str
    partition: int
    offset: int
    timestamp: datetime.datetime | None
    timestamp_type: str | None
    key: bytes | None = field(repr=False)
    value: bytes | None = field(repr=False)
    headers: tuple[tuple[str, bytes], ...] = field(repr=False)
    raw: Mapping[str, Any] = field(repr=False)
    _json_value: Any = field(default=_NOT_PARSED, init=False, repr=False)

    @property
    def json_value(self) -> Any:
        """The value parsed as JSON on first access; raises `ValueError` when it is not JSON."""
        if self._json_value is _NOT_PARSED:
            if self.value is None:
                raise ValueError("a tombstone has no value to parse")
            object.__setattr__(self, "_json_value", json.loads(self.value))
        return self._json_value

    def header(self, name: str) -> bytes | None:
        """Return the last value of header ``name`` (as Kafka's ``lastHeader``); None if absent."""
        values = [value for header, value in self.headers if header == name]
        return values[-1] if values else None

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any]) -> KafkaRecord:
        """Validate a raw record and build the typed record.

        Raises:
            MalformedRecordError: A field Lambda always sends is missing or of the wrong type,
                or the key, value or a header does not decode.
        """
        position = _position(raw)
        if position is None:
            raise MalformedRecordError("Kafka record without a topic, partition and offset")
        kind = raw.get("timestampType")
        if not isinstance(kind, str | None):
            raise MalformedRecordError("Kafka record whose timestampType is not a string")
        topic, partition, offset = position
        return cls(
            topic=topic,
            partition=partition,
            offset=offset,
            timestamp=time_field(
                raw.get("timestamp"), "Kafka record whose timestamp", per_second=1000
            ),
            timestamp_type=kind,
            key=base64_field(raw.get("key"), "Kafka record whose key"),
            value=base64_field(raw.get("value"), "Kafka record whose value"),
            headers=_headers(raw.get("headers")),
            raw=raw,
        )


@keyword_only("@idempotent_kafka_handler(persistence_store=...)")
def idempotent_kafka_handler(
    *,
    persistence_store: PersistenceStore,
    config: IdempotencyConfig | None = None,
    key_prefix: str | None = None,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    time_safety_margin_ms: int = DEFAULT_TIME_SAFETY_MARGIN_MS,
    source_scope: str = "source",
) -> Callable[[Callable[[KafkaRecord, Any], object]], KafkaBatchHandler]:
    """Turn a handler ``(record: KafkaRecord, context)`` into a Kafka batch handler.

    The options are `BatchOptions`'s, each with its default here. Lanes are
    partitions, each in offset order; keys are scoped to the cluster.
    """
    decorator = batch_adapter(SOURCE, locals())  # the parameters, by name
    return cast(Callable[[Callable[[KafkaRecord, Any], object]], KafkaBatchHandler], decorator)


def _grouped(event: Any) -> Mapping[str, list[Any]] | None:
    """Return the event's records by topic-partition; None when it has no such map of lists."""
    grouped = event.get("records") if isinstance(event, Mapping) else None
    if not isinstance(grouped, Mapping) or not all(isinstance(v, list) for v in grouped.values()):
        return None
    return grouped


def _records(event: Any, source: str) -> list[Any]:
    """Return the records of every topic-partition, each partition's in the order sent."""
    grouped = _grouped(event)
    if grouped is None:
        raise MalformedEventError(
            f"a {source} batch handler needs an event with a records map of lists"
        )
    return [record for records in grouped.values() for record in records]


def _one_by_one(event: Any) -> list[tuple[dict[str, Any], Any]]:
    """Cut the event into one event per record, each under its topic-partition."""
    grouped = _grouped(event) or {}
    return [
        ({**event, "records": {partition: [raw]}}, raw)
        for partition, raws in grouped.items()
        for raw in raws
    ]


def _cluster_probes(event: Any) -> list[Probe]:
    """An MSK event names its cluster by eventSourceArn; a self-managed one, by its brokers."""
    if isinstance(event, Mapping) and event.get("eventSource") == "SelfManagedKafka":
        return [(("bootstrapServers",), "probe-1:9092")]
    return [(("eventSourceArn",), "arn:aws:kafka:us-east-1:000000000000:cluster/probe/probe")]


def _position(raw: Mapping[str, Any]) -> tuple[str, int, int] | None:
    """Return ``(topic, partition, offset)``; None when one is missing or of the wrong type."""
    topic, partition, offset = raw.get("topic"), raw.get("partition"), raw.get("offset")
    if not isinstance(topic, str) or not topic:
        return None
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (partition, offset)):
        return None
    return topic, cast(int, partition), cast(int, offset)


def _headers(raw: Any) -> tuple[tuple[str, bytes], ...]:
    """Decode Lambda's headers: a list of ``{name: [byte, ...]}`` maps."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(h, Mapping) for h in raw):
        raise MalformedRecordError("Kafka record whose headers are not a list of maps")
    pairs = [(name, value) for header in raw for name, value in header.items()]
    if not all(isinstance(value, list) for _, value in pairs):
        raise MalformedRecordError("Kafka record with a header that is not a list of bytes")
    try:
        return tuple((str(name), bytes(value)) for name, value in pairs)
    except (TypeError, ValueError) as exc:  # not integers in 0..255
        raise MalformedRecordError("Kafka record with a header that is not bytes") from exc


def _identifier(raw: Mapping[str, Any]) -> str | None:
    position = _position(raw)
    return None if position is None else "{}-{}:{}".format(*position)


def _report_as(raw: Mapping[str, Any]) -> KafkaItemIdentifier:
    topic, partition, offset = cast(tuple[str, int, int], _position(raw))
    return {"partition": f"{topic}-{partition}", "offset": offset}


def _default_key(raw: Mapping[str, Any]) -> Any:
    topic, partition, offset = cast(tuple[str, int, int], _position(raw))
    return {"topic": topic, "partition": partition, "offset": offset}


def _partition(raw: Mapping[str, Any]) -> Hashable | None:
    position = _position(raw)
    return None if position is None else position[:2]


def _cluster(event: Any, raw: Mapping[str, Any]) -> object:
    """The MSK cluster's ARN; the brokers for self-managed Kafka, which has no ARN."""
    return event.get("eventSourceArn") or event.get("bootstrapServers")


SOURCE: BatchSource[KafkaRecord] = BatchSource(
    name="kafka",
    decorator="idempotent_kafka_handler",
    parse=KafkaRecord.from_raw,
    identifier=_identifier,
    default_key=_default_key,
    scope=_cluster,
    chain=_partition,
    records=_records,
    report_as=_report_as,
    event_shape="an object with a records map of non-empty lists (topic-partition: records)",
    scope_field="the event's eventSourceArn (bootstrapServers for eventSource SelfManagedKafka)",
    one_by_one=_one_by_one,
    scope_probes=_cluster_probes,
)
