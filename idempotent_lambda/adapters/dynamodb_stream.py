"""Idempotent processing of DynamoDB Stream batches with partial batch responses.

Decorate a handler of one stream record; the result is the Lambda handler for the whole batch:

```python
from idempotent_lambda import DynamoDBPersistenceLayer
from idempotent_lambda.adapters.dynamodb_stream import (
    DynamoDBStreamRecord,
    idempotent_stream_handler,
)

store = DynamoDBPersistenceLayer("IdempotencyTable")

@idempotent_stream_handler(persistence_store=store)
def handler(record: DynamoDBStreamRecord, context) -> None:
    if record.event_name == "INSERT":
        send_welcome_email(record.new_image["email"])
```

The event source mapping must enable `ReportBatchItemFailures`. The batch handler returns
`{"batchItemFailures": [{"itemIdentifier": sequence_number}, ...]}`; an `async def` record
handler works too. TTL deletions are delivered like any REMOVE: check `record.is_ttl_removal`.
Bad options raise `IdempotencyConfigError` at decoration time.

- **Key**: the table (from `eventSourceARN`), the item keys and the sequence number, so a re-read
  record replays; `event_key_jmespath` reads the raw record instead (for instance
  `"dynamodb.NewImage.version.N"` together with the keys). Either way the key is scoped to the
  table, unless `source_scope="shared"`.
- **Order**: the records of one item (same `Keys`) run in sequence order; different items run
  concurrently (`max_concurrency`). Once a record fails (malformed, key error, in progress
  elsewhere, store error, handler raised), the item's later records do not start. Lambda resumes
  the shard from the lowest failed sequence number, so every record from there on is reported,
  including records of other items that completed: on the retry those replay from their
  idempotency records, all read at once when the store can (`BatchReadStore`).
- Each failure is logged with the sequence number and error class; the answer is the same
  whatever `max_concurrency` is.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

from idempotent_lambda._entry import keyword_only
from idempotent_lambda.adapters import _batch_exports
from idempotent_lambda.adapters._batch import BatchHandler
from idempotent_lambda.adapters._batch_exports import *  # noqa: F403 - see __all__
from idempotent_lambda.adapters._batch_exports import (
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_TIME_SAFETY_MARGIN_MS,
    batch_adapter,
)
from idempotent_lambda.adapters._batch_source import BatchSource, at, time_field
from idempotent_lambda.exceptions import MalformedRecordError

if TYPE_CHECKING:
    from idempotent_lambda.config import IdempotencyConfig
    from idempotent_lambda.persistence.protocol import PersistenceStore

__all__ = [
    "DynamoDBStreamRecord",
    "idempotent_stream_handler",
]
__all__ += _batch_exports.__all__  # the names every batch adapter module shares

EventName = Literal["INSERT", "MODIFY", "REMOVE"]
_EVENT_NAMES = frozenset({"INSERT", "MODIFY", "REMOVE"})
#: Who deletes an item when its TTL passes (``userIdentity.principalId`` of such a REMOVE).
TTL_PRINCIPAL = "dynamodb.amazonaws.com"


@dataclass(frozen=True, slots=True, eq=False)
class DynamoDBStreamRecord:
    """One DynamoDB Stream record as the record handler receives it.

    Images and keys are plain Python: numbers are `decimal.Decimal`, binary values `bytes`, sets
    Python sets, maps and lists dicts and lists.

    Attributes:
        event_id: The record's unique id (``eventID``).
        event_name: ``"INSERT"``, ``"MODIFY"`` or ``"REMOVE"``.
        sequence_number: The record's sequence number (its ``itemIdentifier``).
        keys: The item's key attributes.
        new_image: The item after the change; None when the stream view does not carry it.
        old_image: The item before the change; None when the stream view does not carry it.
        approximate_creation_time: When the change happened (UTC), when given.
        stream_view_type: ``KEYS_ONLY``, ``NEW_IMAGE``, ``OLD_IMAGE`` or ``NEW_AND_OLD_IMAGES``.
        is_ttl_removal: True for a REMOVE made by DynamoDB's TTL process, not by a user.
        event_source_arn: The stream's ARN.
        raw: The record exactly as Lambda delivered it (what ``event_key_jmespath`` reads).
    """

    event_id: str
    event_name: EventName
    sequence_number: str
    keys: dict[str, Any] = field(repr=False)
    new_image: dict[str, Any] | None = field(repr=False)
    old_image: dict[str, Any] | None = field(repr=False)
    approximate_creation_time: datetime.datetime | None
    stream_view_type: str | None
    is_ttl_removal: bool
    event_source_arn: str | None
    raw: Mapping[str, Any] = field(repr=False)

    @property
    def table_arn(self) -> str | None:
        """The ARN of the table whose stream this is, when the record names its stream."""
        return table_arn(self.event_source_arn)

    @property
    def table_name(self) -> str | None:
        """The name of the table whose stream this is, when the record names its stream."""
        arn = self.table_arn
        return arn.split(":table/", 1)[1] if arn is not None and ":table/" in arn else None

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any]) -> DynamoDBStreamRecord:
        """Validate a raw stream record and build the typed record.

        Raises:
            MalformedRecordError: A field the stream always sends is missing or of the wrong
                type, or an image does not decode.
        """
        change = raw.get("dynamodb")
        if not isinstance(change, Mapping):
            raise MalformedRecordError("stream record without a dynamodb section")
        sequence_number = change.get("SequenceNumber")
        if not isinstance(sequence_number, str) or not sequence_number:
            raise MalformedRecordError("stream record without a SequenceNumber")
        event_id = raw.get("eventID")
        if not isinstance(event_id, str):
            raise MalformedRecordError("stream record without an eventID")
        event_name = raw.get("eventName")
        if not isinstance(event_name, str) or event_name not in _EVENT_NAMES:  # [] is unhashable
            raise MalformedRecordError("stream record whose eventName is not INSERT/MODIFY/REMOVE")
        keys = _image(change.get("Keys"), "Keys")
        if keys is None:
            raise MalformedRecordError("stream record without Keys")
        arn = raw.get("eventSourceARN")
        view = change.get("StreamViewType")
        if not isinstance(arn, str | None) or not isinstance(view, str | None):
            raise MalformedRecordError("stream record with a non-string ARN or view type")
        identity = raw.get("userIdentity")
        is_ttl = (
            event_name == "REMOVE"
            and isinstance(identity, Mapping)
            and identity.get("type") == "Service"
            and identity.get("principalId") == TTL_PRINCIPAL
        )
        return cls(
            event_id=event_id,
            event_name=cast(EventName, event_name),
            sequence_number=sequence_number,
            keys=keys,
            new_image=_image(change.get("NewImage"), "NewImage"),
            old_image=_image(change.get("OldImage"), "OldImage"),
            approximate_creation_time=time_field(
                change.get("ApproximateCreationDateTime"),
                "stream record whose ApproximateCreationDateTime",
            ),
            stream_view_type=view,
            is_ttl_removal=is_ttl,
            event_source_arn=arn,
            raw=raw,
        )


@keyword_only("@idempotent_stream_handler(persistence_store=...)")
def idempotent_stream_handler(
    *,
    persistence_store: PersistenceStore,
    config: IdempotencyConfig | None = None,
    key_prefix: str | None = None,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    time_safety_margin_ms: int = DEFAULT_TIME_SAFETY_MARGIN_MS,
    source_scope: str = "source",
) -> Callable[[Callable[[DynamoDBStreamRecord, Any], object]], BatchHandler]:
    """Turn a handler ``(record: DynamoDBStreamRecord, context)`` into a stream batch handler.

    The options are `BatchOptions`'s, each with its default here. Lanes are items,
    each in sequence order; keys are scoped to the table.
    """
    return batch_adapter(SOURCE, locals())  # the parameters, by name


def table_arn(stream_arn: object) -> str | None:
    """Return the table ARN in a stream ARN (the part before ``/stream/``), or None."""
    if not isinstance(stream_arn, str) or ":table/" not in stream_arn:
        return None
    return stream_arn.split("/stream/", 1)[0]


def _image(value: Any, name: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise MalformedRecordError(f"stream record whose {name} is not a map of attributes")
    deserialize = _deserializer().deserialize
    try:
        return {str(key): deserialize(attribute) for key, attribute in value.items()}
    except Exception as exc:  # TypeError, decimal traps, bad base64, unknown type tags, ...
        raise MalformedRecordError(
            f"stream record whose {name} does not decode: {type(exc).__name__}"
        ) from exc


@functools.cache
def _deserializer() -> Any:
    """Build boto3's TypeDeserializer, adjusted for stream events.

    Binary arrives as base64 text in a Lambda event and becomes `bytes` (not boto3's ``Binary``);
    a number that does not parse is an error rather than ``Decimal("NaN")``.
    """
    from boto3.dynamodb.types import DYNAMODB_CONTEXT, TypeDeserializer

    class StreamDeserializer(TypeDeserializer):
        def _deserialize_n(self, value: str) -> decimal.Decimal:
            number = DYNAMODB_CONTEXT.create_decimal(value)
            if not number.is_finite():  # NaN when the text is not a number at all
                raise ValueError("not a DynamoDB number")
            return number

        def _deserialize_ns(self, value: list[str]) -> set[decimal.Decimal]:
            return {self._deserialize_n(item) for item in value}

        def _deserialize_b(self, value: str) -> bytes:
            return base64.b64decode(value, validate=True)

        def _deserialize_bs(self, value: list[str]) -> set[bytes]:
            return {self._deserialize_b(item) for item in value}

    return StreamDeserializer()


def _default_key(raw: Mapping[str, Any]) -> Any:
    change = raw["dynamodb"]
    return {"keys": change.get("Keys"), "sequence_number": change["SequenceNumber"]}


def _table(event: Any, raw: Mapping[str, Any]) -> str | None:
    """Scope keys to the table: a stream re-enabled under a new label keeps its key space."""
    return table_arn(raw.get("eventSourceARN"))


def _item(raw: Mapping[str, Any]) -> str | None:
    """Return the record's item, its keys as delivered canonically ordered (a batch is a shard)."""
    keys = at("dynamodb", "Keys")(raw)
    if not isinstance(keys, Mapping):
        return None
    try:
        return json.dumps(keys, sort_keys=True)
    except (TypeError, ValueError, RecursionError):  # not JSON, or nested absurdly deep
        return None


SOURCE: BatchSource[DynamoDBStreamRecord] = BatchSource(
    decorator="idempotent_stream_handler",
    name="dynamodb_stream",
    parse=DynamoDBStreamRecord.from_raw,
    identifier=at("dynamodb", "SequenceNumber"),
    default_key=_default_key,
    scope=_table,
    chain=_item,
    checkpoint=True,  # streams carry no redelivery hint: a retried shard resends its tail
)
