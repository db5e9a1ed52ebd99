"""Idempotent processing of Kinesis Data Streams batches with partial batch responses.

Decorate a handler of one record; the result is the Lambda handler for the whole batch:

```python
from idempotent_lambda import DynamoDBPersistenceLayer
from idempotent_lambda.adapters.kinesis import KinesisRecord, idempotent_kinesis_handler

store = DynamoDBPersistenceLayer("IdempotencyTable")

@idempotent_kinesis_handler(persistence_store=store)
def handler(record: KinesisRecord, context) -> None:
    record_click(record.partition_key, record.json_data)
```

The event source mapping must enable `ReportBatchItemFailures`. The batch handler returns
`{"batchItemFailures": [{"itemIdentifier": sequence_number}, ...]}`; an `async def` record
handler works too. Bad options raise `IdempotencyConfigError` at decoration time.

- **Key**: the stream (`eventSourceARN`) and the record's `eventID` (shard and sequence
  number), so a record Lambda sends again replays. `event_key_jmespath` reads the raw record
  instead, for instance `powertools_json(powertools_base64(kinesis.data)).order_id`; the key
  stays scoped to the stream unless `source_scope="shared"`.
- **Order**: the records of one partition key run in sequence order; different partition keys
  run concurrently (`max_concurrency`). Once a record fails (malformed, key error, in progress
  elsewhere, store error, handler raised), its partition key's later records do not start.
  Lambda resumes the shard from the lowest failed sequence number, so every record from there
  on is reported: records of other partition keys in that tail that completed replay on the
  retry, all read at once when the store can (`BatchReadStore`).
- **Malformed records** (data that is not base64, no sequence number) fail on their own, with a
  log line; a record is reported by its `eventID`'s sequence number when `sequenceNumber` is
  missing. An event without a `Records` list raises `MalformedEventError`.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from idempotent_lambda._entry import keyword_only
from idempotent_lambda.adapters import _batch_exports
from idempotent_lambda.adapters._batch import BatchHandler
from idempotent_lambda.adapters._batch_exports import *  # noqa: F403 - see __all__
from idempotent_lambda.adapters._batch_exports import (
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_TIME_SAFETY_MARGIN_MS,
    batch_adapter,
)
from idempotent_lambda.adapters._batch_source import BatchSource, at, base64_field, time_field
from idempotent_lambda.exceptions import MalformedRecordError

if TYPE_CHECKING:
    from idempotent_lambda.config import IdempotencyConfig
    from idempotent_lambda.persistence.protocol import PersistenceStore

__all__ = [
    "KinesisRecord",
    "idempotent_kinesis_handler",
]
__all__ += _batch_exports.__all__  # the names every batch adapter module shares

_NOT_PARSED: Any = object()


@dataclass(frozen=True, slots=True, eq=False)
class KinesisRecord:
    """One Kinesis record as the record handler receives it.

    Attributes:
        data: The record's data, base64-decoded.
        partition_key: The partition key it was put with (its order is kept per key).
        sequence_number: Its sequence number in the shard (its ``itemIdentifier``).
        approximate_arrival_time: When the stream received it (UTC), when given.
        event_id: ``"{shard id}:{sequence number}"``.
        event_source_arn: The stream's ARN.
        raw: The record exactly as Lambda delivered it (what ``event_key_jmespath`` reads).
    """

    data: bytes = field(repr=False)
    partition_key: str
    sequence_number: str
    approximate_arrival_time: datetime.datetime | None
    event_id: str
    event_source_arn: str | None
    raw: Mapping[str, Any] = field(repr=False)
    _json_data: Any = field(default=_NOT_PARSED, init=False, repr=False)

    @property
    def json_data(self) -> Any:
        """The data parsed as JSON on first access; raises `ValueError` when it is not JSON."""
        if self._json_data is _NOT_PARSED:
            object.__setattr__(self, "_json_data", json.loads(self.data))
        return self._json_data

    @property
    def shard_id(self) -> str:
        """The shard the record comes from (the part of ``event_id`` before the colon)."""
        return self.event_id.partition(":")[0]

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any]) -> KinesisRecord:
        """Validate a raw record and build the typed record.

        Raises:
            MalformedRecordError: A field Kinesis always sends is missing or of the wrong type,
                or the data is not base64.
        """
        kinesis = raw.get("kinesis")
        if not isinstance(kinesis, Mapping):
            raise MalformedRecordError("Kinesis record without a kinesis section")
        sequence_number = kinesis.get("sequenceNumber")
        if not isinstance(sequence_number, str) or not sequence_number:
            raise MalformedRecordError("Kinesis record without a sequenceNumber")
        partition_key = kinesis.get("partitionKey")
        if not isinstance(partition_key, str):
            raise MalformedRecordError("Kinesis record without a partitionKey")
        event_id, arn = raw.get("eventID"), raw.get("eventSourceARN")
        if not isinstance(event_id, str) or not isinstance(arn, str | None):
            raise MalformedRecordError("Kinesis record without an eventID, or a non-string ARN")
        return cls(
            data=_data(kinesis.get("data")),
            partition_key=partition_key,
            sequence_number=sequence_number,
            approximate_arrival_time=time_field(
                kinesis.get("approximateArrivalTimestamp"),
                "Kinesis record whose approximateArrivalTimestamp",
            ),
            event_id=event_id,
            event_source_arn=arn,
            raw=raw,
        )


@keyword_only("@idempotent_kinesis_handler(persistence_store=...)")
def idempotent_kinesis_handler(
    *,
    persistence_store: PersistenceStore,
    config: IdempotencyConfig | None = None,
    key_prefix: str | None = None,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    time_safety_margin_ms: int = DEFAULT_TIME_SAFETY_MARGIN_MS,
    source_scope: str = "source",
) -> Callable[[Callable[[KinesisRecord, Any], object]], BatchHandler]:
    """Turn a handler ``(record: KinesisRecord, context)`` into a Kinesis batch handler.

    The options are `BatchOptions`'s, each with its default here. Lanes are partition
    keys, each in sequence order; keys are scoped to the stream.
    """
    return batch_adapter(SOURCE, locals())  # the parameters, by name


def _data(value: Any) -> bytes:
    data = base64_field(value, "Kinesis record whose data")
    if data is None:
        raise MalformedRecordError("Kinesis record without data")
    return data


_sequence_number = at("kinesis", "sequenceNumber")
_partition_key = at("kinesis", "partitionKey")


def _identifier(raw: Mapping[str, Any]) -> object:
    """The sequence number; the one in ``eventID`` when the record lacks its own."""
    found = _sequence_number(raw)
    event_id = raw.get("eventID")
    if found is None and isinstance(event_id, str):
        return event_id.partition(":")[2]
    return found


def _chain(raw: Mapping[str, Any]) -> Hashable | None:
    key = _partition_key(raw)
    return key if isinstance(key, str) else None


SOURCE: BatchSource[KinesisRecord] = BatchSource(
    decorator="idempotent_kinesis_handler",
    name="kinesis",
    parse=KinesisRecord.from_raw,
    identifier=_identifier,
    default_key=at("eventID"),
    chain=_chain,
    checkpoint=True,  # a retried shard resends everything from the checkpoint on
)
