"""Idempotent processing of SQS batches with partial batch responses.

Decorate a handler of one message; the result is the Lambda handler for the whole batch:

```python
from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig
from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler

store = DynamoDBPersistenceLayer("IdempotencyTable")

@idempotent_sqs_handler(
    persistence_store=store,
    config=IdempotencyConfig(event_key_jmespath="powertools_json(body).order_id"),
)
def handler(record: SQSRecord, context) -> dict:
    return charge(record.json_body)
```

The event source mapping must enable `ReportBatchItemFailures`. The batch handler returns
`{"batchItemFailures": [{"itemIdentifier": message_id}, ...]}`, the messages to retry; an
`async def` record handler works too (the batch handler stays synchronous). Bad options raise
`IdempotencyConfigError` at decoration time.

- **Key**: the queue (`eventSourceARN`) and the message id, so a redelivered message replays;
  `event_key_jmespath` reads the raw record instead, so two messages with the same business key
  run once. Either way the key is scoped to the queue: the same order id from two queues runs
  twice, unless `source_scope="shared"`. Records of one batch with the same key run one after
  the other, and the later ones replay the first one's result.
- **One read**: before any record runs, every key is read at once when the store can
  (`BatchReadStore`), unless every message's `ApproximateReceiveCount` is 1; records already
  COMPLETED replay from that read.
- **Failures**: a malformed record, a key error, a key in progress elsewhere, a store error or
  the handler raising fails that record (logged with its message id and error class, never the
  body). Standard queues: every record is attempted. FIFO queues (ARN ending in `.fifo`): once a
  record fails, the rest of its message group is reported without running, while other groups go
  on (Powertools' `skip_group_on_error=True`).
- **Concurrency**: up to `max_concurrency` records (FIFO: message groups) run at once; the
  answer is the same whatever it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from idempotent_lambda._entry import keyword_only
from idempotent_lambda._outbox_format import QUEUE_BODY
from idempotent_lambda.adapters import _batch_exports
from idempotent_lambda.adapters._batch import BatchHandler
from idempotent_lambda.adapters._batch_exports import *  # noqa: F403 - see __all__
from idempotent_lambda.adapters._batch_exports import (
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_TIME_SAFETY_MARGIN_MS,
    batch_adapter,
)
from idempotent_lambda.adapters._batch_source import BatchSource, at, base64_field
from idempotent_lambda.exceptions import MalformedRecordError

if TYPE_CHECKING:
    from idempotent_lambda.config import IdempotencyConfig
    from idempotent_lambda.persistence.protocol import PersistenceStore

__all__ = [
    "SQSMessageAttribute",
    "SQSRecord",
    "idempotent_sqs_handler",
]
__all__ += _batch_exports.__all__  # the names every batch adapter module shares

_NOT_PARSED: Any = object()


@dataclass(frozen=True, slots=True)
class SQSMessageAttribute:
    """One message attribute: its data type and its string or (decoded) binary value."""

    data_type: str
    string_value: str | None = None
    binary_value: bytes | None = None


@dataclass(frozen=True, slots=True, eq=False)
class SQSRecord:
    """One SQS message as the record handler receives it.

    Attributes:
        message_id: The message id (the record's ``itemIdentifier`` and its default key).
        body: The message body, as sent.
        attributes: System attributes (``ApproximateReceiveCount``, ``SentTimestamp``, ...).
        message_attributes: The sender's message attributes by name.
        event_source_arn: The queue's ARN.
        raw: The record exactly as Lambda delivered it (what ``event_key_jmespath`` reads).
    """

    message_id: str
    body: str = field(repr=False)
    attributes: Mapping[str, str] = field(repr=False)
    message_attributes: Mapping[str, SQSMessageAttribute] = field(repr=False)
    event_source_arn: str | None
    raw: Mapping[str, Any] = field(repr=False)
    _json_body: Any = field(default=_NOT_PARSED, init=False, repr=False)

    @property
    def json_body(self) -> Any:
        """The body parsed as JSON on first access; raises `json.JSONDecodeError`."""
        if self._json_body is _NOT_PARSED:
            object.__setattr__(self, "_json_body", json.loads(self.body))
        return self._json_body

    @property
    def message_group_id(self) -> str | None:
        """The FIFO message group id; None on a standard queue."""
        return self.attributes.get("MessageGroupId")

    @property
    def message_deduplication_id(self) -> str | None:
        """The FIFO deduplication id; None on a standard queue."""
        return self.attributes.get("MessageDeduplicationId")

    @property
    def approximate_receive_count(self) -> int | None:
        """How many times the message was received, this delivery included, when known."""
        count = self.attributes.get("ApproximateReceiveCount")
        return int(count) if count is not None and count.isdigit() else None

    @property
    def queue_is_fifo(self) -> bool:
        """Whether the message comes from a FIFO queue."""
        return is_fifo_arn(self.event_source_arn)

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any]) -> SQSRecord:
        """Validate a raw record and build the typed record.

        Raises:
            MalformedRecordError: A field SQS always sends is missing or of the wrong type.
        """
        message_id = raw.get("messageId")
        if not isinstance(message_id, str) or not message_id:
            raise MalformedRecordError("SQS record without a messageId")
        body = raw.get("body")
        if not isinstance(body, str):
            raise MalformedRecordError("SQS record whose body is missing or not a string")
        attributes = raw.get("attributes") or {}
        if not isinstance(attributes, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()
        ):
            raise MalformedRecordError("SQS record whose attributes are not strings by name")
        arn = raw.get("eventSourceARN")
        if arn is not None and not isinstance(arn, str):
            raise MalformedRecordError("SQS record whose eventSourceARN is not a string")
        return cls(
            message_id=message_id,
            body=body,
            attributes=dict(attributes),
            message_attributes=_message_attributes(raw.get("messageAttributes")),
            event_source_arn=arn,
            raw=raw,
        )


@keyword_only("@idempotent_sqs_handler(persistence_store=...)")
def idempotent_sqs_handler(
    *,
    persistence_store: PersistenceStore,
    config: IdempotencyConfig | None = None,
    key_prefix: str | None = None,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    time_safety_margin_ms: int = DEFAULT_TIME_SAFETY_MARGIN_MS,
    source_scope: str = "source",
) -> Callable[[Callable[[SQSRecord, Any], object]], BatchHandler]:
    """Turn a handler ``(record: SQSRecord, context)`` into an idempotent SQS batch handler.

    The options are `BatchOptions`'s, each with its default here. Lanes are records,
    or a FIFO queue's message groups, each in order; keys are scoped to the queue.
    """
    return batch_adapter(SOURCE, locals())  # the parameters, by name


def is_fifo_arn(arn: object) -> bool:
    """Tell whether ``arn`` names a FIFO queue."""
    return isinstance(arn, str) and arn.endswith(".fifo")


def _message_attributes(raw: Any) -> dict[str, SQSMessageAttribute]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise MalformedRecordError("SQS record whose messageAttributes is not a mapping")
    attributes = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not isinstance(value, Mapping):
            raise MalformedRecordError("SQS record with a malformed message attribute")
        data_type = value.get("dataType")
        string_value = value.get("stringValue")
        binary_value = value.get("binaryValue")
        if not isinstance(data_type, str) or not isinstance(string_value, str | None):
            raise MalformedRecordError("SQS record with a malformed message attribute")
        attributes[name] = SQSMessageAttribute(
            data_type=data_type,
            string_value=string_value,
            binary_value=base64_field(binary_value, "SQS record with a binary attribute that"),
        )
    return attributes


def _chain(raw: Mapping[str, Any]) -> Hashable | None:
    """FIFO: the message group (a record without one is a group of its own); else None."""
    if not is_fifo_arn(raw.get("eventSourceARN")):
        return None
    group = _group(raw)
    return ("group", group) if isinstance(group, str) else ("message", raw.get("messageId"))


_group = at("attributes", "MessageGroupId")
_receive_count = at("attributes", "ApproximateReceiveCount")

SOURCE: BatchSource[SQSRecord] = BatchSource(
    decorator="idempotent_sqs_handler",
    name="sqs",
    parse=SQSRecord.from_raw,
    identifier=at("messageId"),
    default_key=at("messageId"),
    chain=_chain,
    first_delivery=lambda raw: _receive_count(raw) == "1",
    carrier=at(QUEUE_BODY),  # an outbox event that a rule put on the queue, as JSON text
)
