"""The decorators `idempotent-lambda key` can run, and how a batch adapter's event holds records.

`ADAPTERS` lists each decorator by the name `--decorator` takes; a batch adapter's `BatchShape`
says how its event is cut into one event per record, and which field names the records' source
(a batch key is scoped to it), so the dry run (`_dry_run`) can tell a key from one it cannot.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

Probe = tuple[tuple[str | int, ...], str]
"""A field an event may lack (its path), and a value of the right shape to probe it with."""
#: A batch record's source; the stand-in has the shape of a stream ARN, which every source reads.
_SOURCE_ARN: Probe = (
    ("Records", 0, "eventSourceARN"),
    "arn:aws:dynamodb:us-east-1:000000000000:table/probe/stream/probe",
)


@dataclass(frozen=True, slots=True)
class BatchShape:
    """How a batch adapter's event holds its records, and where their source is named.

    Attributes:
        description: What the adapter takes, for the error when the event is not that.
        source: The field naming the records' source (their keys include it).
        singles: The event cut into one event per record, in the adapter's order, each with
            its raw record; None when the event holds no records.
        source_probes: The source fields the event lacks that the key may depend on.
    """

    description: str
    source: str
    singles: Callable[[Any], list[tuple[dict[str, Any], Any]] | None]
    source_probes: Callable[[Any], list[Probe]]


def _records_one_by_one(event: Any) -> list[tuple[dict[str, Any], Any]] | None:
    records = event.get("Records") if isinstance(event, Mapping) else None
    if not isinstance(records, list) or not records:
        return None
    return [({**event, "Records": [raw]}, raw) for raw in records]


def _kafka_one_by_one(event: Any) -> list[tuple[dict[str, Any], Any]] | None:
    grouped = event.get("records") if isinstance(event, Mapping) else None
    if not isinstance(grouped, Mapping) or not all(isinstance(v, list) for v in grouped.values()):
        return None
    singles = [
        ({**event, "records": {partition: [raw]}}, raw)
        for partition, raws in grouped.items()
        for raw in raws
    ]
    return singles or None


def _kafka_source(event: Any) -> list[Probe]:
    """An MSK event's source is its eventSourceArn; a self-managed cluster's, its brokers."""
    if isinstance(event, Mapping) and event.get("eventSource") == "SelfManagedKafka":
        return [(("bootstrapServers",), "probe-1:9092")]
    return [(("eventSourceArn",), "arn:aws:kafka:us-east-1:000000000000:cluster/probe/probe")]


RECORDS = BatchShape(
    "an object with a non-empty Records list",
    "the record's eventSourceARN",
    _records_one_by_one,
    lambda event: [_SOURCE_ARN],
)
KAFKA = BatchShape(
    "an object with a records map of non-empty lists (topic-partition: records)",
    "the event's eventSourceArn (bootstrapServers for eventSource SelfManagedKafka)",
    _kafka_one_by_one,
    _kafka_source,
)


@dataclass(frozen=True, slots=True)
class Adapter:
    """A decorator the `key` command can run: where it lives, and how it is called.

    Attributes:
        module: The module that defines it.
        name: Its name, as `--decorator` takes it.
        batch: How a batch adapter's event holds its records (each has its own key); None for
            the others.
        record_class: The batch adapter's typed record, whose ``from_raw`` says what is wrong
            with a record the adapter fails.
    """

    module: str
    name: str
    batch: BatchShape | None = None
    record_class: str | None = None

    def load(self) -> Callable[..., Any] | None:
        """Return the decorator; None when this version of the library has none of that name."""
        try:
            found = getattr(importlib.import_module(self.module), self.name)
        except (ImportError, AttributeError):
            return None
        return cast(Callable[..., Any], found)


ADAPTERS = {
    adapter.name: adapter
    for adapter in (
        Adapter("idempotent_lambda", "idempotent"),
        Adapter("idempotent_lambda", "idempotent_function"),
        Adapter("idempotent_lambda.adapters.api_gateway", "idempotent_http"),
        Adapter("idempotent_lambda.adapters.sqs", "idempotent_sqs_handler", RECORDS, "SQSRecord"),
        Adapter(
            "idempotent_lambda.adapters.dynamodb_stream",
            "idempotent_stream_handler",
            RECORDS,
            "DynamoDBStreamRecord",
        ),
        Adapter(
            "idempotent_lambda.adapters.kinesis",
            "idempotent_kinesis_handler",
            RECORDS,
            "KinesisRecord",
        ),
        Adapter(
            "idempotent_lambda.adapters.kafka", "idempotent_kafka_handler", KAFKA, "KafkaRecord"
        ),
    )
}
