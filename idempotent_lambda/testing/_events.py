"""SQS and DynamoDB Streams events shaped as AWS sends them, for tests; re-exported by
`idempotent_lambda.testing`, with the batch builders' shared parts.

Payloads are sent as AWS carries them: a `str` as it is, `bytes` as they are (base64-encoded
where AWS encodes), anything else as JSON text.
"""

from __future__ import annotations

import base64
import decimal
import hashlib
import itertools
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict, TypeVar, cast

__all__ = ["SQSMessageFields", "StreamRecordFields", "dynamodb_stream_event", "sqs_event"]

ACCOUNT = "123456789012"
QUEUE = f"arn:aws:sqs:us-east-1:{ACCOUNT}:orders"
TABLE_STREAM = f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/orders/stream/2026-01-01T00:00:00.000"

# One counter for every sequence number and offset: later records, and later events, are
# always further along their queue, shard or partition. Sequence numbers start from AWS's
# examples, so they have the length AWS's have.
_position = itertools.count(1)
STREAM_FIRST = 4421584500000000017450439091
FIFO_FIRST = 18849496460467696128
FieldsT = TypeVar("FieldsT", bound=Mapping[str, Any])


class SQSMessageFields(TypedDict, total=False):
    """One message of `sqs_event(records=...)`: the keywords of `sqs_event` for that message."""

    body: Any
    message_id: str | None
    message_group_id: str | None
    attributes: Mapping[str, str] | None
    message_attributes: Mapping[str, str | bytes | int | float | decimal.Decimal] | None
    receive_count: int


class StreamRecordFields(TypedDict, total=False):
    """One record of `dynamodb_stream_event(records=...)`: its keywords for that record."""

    keys: Mapping[str, Any] | None
    new_image: Mapping[str, Any] | None
    old_image: Mapping[str, Any] | None
    event_name: Literal["INSERT", "MODIFY", "REMOVE"] | None
    sequence_number: str | None
    event_id: str | None
    ttl_removal: bool


def sqs_event(
    *,
    body: Any = "{}",
    message_id: str | None = None,
    message_group_id: str | None = None,
    attributes: Mapping[str, str] | None = None,
    message_attributes: Mapping[str, str | bytes | int | float | decimal.Decimal] | None = None,
    receive_count: int = 1,
    records: Sequence[SQSMessageFields] | None = None,
    queue_arn: str | None = None,
) -> dict[str, Any]:
    """Return an SQS event (`{"Records": [...]}`) as Lambda's event source mapping sends it.

    Args:
        body: The message body: a `str` as it is, `bytes` decoded as UTF-8, else JSON.
        message_id: The message id; a fresh UUID by default.
        message_group_id: A FIFO message group: adds the FIFO attributes, and the default
            queue becomes `orders.fifo`.
        attributes: System attributes merged over the defaults (`SentTimestamp`, ...).
        message_attributes: The sender's attributes: `str` (String), `bytes` (Binary) or a
            number (Number).
        receive_count: `ApproximateReceiveCount`; more than 1 is a redelivery.
        records: One entry per message, each overriding the keywords above for its message.
        queue_arn: The queue (`eventSourceARN`).
    """
    fields = each_record(
        records,
        SQSMessageFields(
            body=body,
            message_id=message_id,
            message_group_id=message_group_id,
            attributes=attributes,
            message_attributes=message_attributes,
            receive_count=receive_count,
        ),
    )
    if queue_arn is None:
        fifo = any(entry["message_group_id"] is not None for entry in fields)
        queue_arn = f"{QUEUE}.fifo" if fifo else QUEUE
    return {"Records": [_sqs_record(entry, queue_arn) for entry in fields]}


def dynamodb_stream_event(
    *,
    keys: Mapping[str, Any] | None = None,
    new_image: Mapping[str, Any] | None = None,
    old_image: Mapping[str, Any] | None = None,
    event_name: Literal["INSERT", "MODIFY", "REMOVE"] | None = None,
    sequence_number: str | None = None,
    event_id: str | None = None,
    ttl_removal: bool = False,
    records: Sequence[StreamRecordFields] | None = None,
    stream_arn: str = TABLE_STREAM,
    stream_view_type: str = "NEW_AND_OLD_IMAGES",
) -> dict[str, Any]:
    """Return a DynamoDB Streams event, with keys and images in DynamoDB JSON.

    Keys and images are plain Python (numbers as `int` or `Decimal`; a `float` is converted
    through its text), serialised with boto3's `TypeSerializer`. With no arguments: the INSERT
    of `{"id": "1"}`.

    Args:
        keys: The item's key attributes; by default the `id` attribute of the image.
        new_image: The item after the change.
        old_image: The item before the change.
        event_name: By default MODIFY with both images, REMOVE with only the old one, else
            INSERT. Without images, the item's keys stand for the image the change has.
        sequence_number: The record's `SequenceNumber`; by default one past the last one made.
        event_id: The record's `eventID`; a fresh one by default.
        ttl_removal: A REMOVE made by DynamoDB's time to live (`userIdentity` of the service).
        records: One entry per record, each overriding the keywords above for its record.
        stream_arn: The stream (`eventSourceARN`).
        stream_view_type: `KEYS_ONLY`, `NEW_IMAGE` or `OLD_IMAGE` leave out the images that
            view does not carry.

    Raises:
        ValueError: `keys` is needed (the image has no `id`), or `ttl_removal` names another
            event than REMOVE.
    """
    fields = each_record(
        records,
        StreamRecordFields(
            keys=keys,
            new_image=new_image,
            old_image=old_image,
            event_name=event_name,
            sequence_number=sequence_number,
            event_id=event_id,
            ttl_removal=ttl_removal,
        ),
    )
    return {"Records": [_stream_record(entry, stream_arn, stream_view_type) for entry in fields]}


def each_record(records: Sequence[FieldsT] | None, defaults: FieldsT) -> list[FieldsT]:
    """Return the fields of every record: `defaults`, overridden by each entry of `records`."""
    if records is None:
        return [defaults]
    return [cast(FieldsT, {**defaults, **entry}) for entry in records]


def next_position(first: int) -> str:
    """Return the next position after `first`, as text (sequence numbers are strings)."""
    return str(first + next(_position))


def _sqs_record(entry: SQSMessageFields, queue_arn: str) -> dict[str, Any]:
    body = payload_bytes(entry["body"]).decode()
    sent = str(time.time_ns() // 1_000_000)
    attributes = {
        "ApproximateReceiveCount": str(entry["receive_count"]),
        "SentTimestamp": sent,
        "SenderId": "AIDAIENQZJOLO23YVJ4VO",
        "ApproximateFirstReceiveTimestamp": sent,
    }
    group = entry["message_group_id"]
    if group is not None:
        attributes["SequenceNumber"] = next_position(FIFO_FIRST)
        attributes["MessageGroupId"] = group
        attributes["MessageDeduplicationId"] = hashlib.sha256(body.encode()).hexdigest()
    attributes.update(entry["attributes"] or {})
    return {
        "messageId": entry["message_id"] or str(uuid.uuid4()),
        "receiptHandle": f"AQEB{uuid.uuid4().hex}",
        "body": body,
        "attributes": attributes,
        "messageAttributes": {
            name: _message_attribute(value)
            for name, value in (entry["message_attributes"] or {}).items()
        },
        "md5OfBody": hashlib.md5(body.encode(), usedforsecurity=False).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": queue_arn.split(":")[3],
    }


def _message_attribute(value: str | bytes | float | decimal.Decimal) -> dict[str, Any]:
    attribute: dict[str, Any] = {"stringListValues": [], "binaryListValues": []}
    if isinstance(value, bytes):
        attribute.update(binaryValue=_base64_text(value), dataType="Binary")
    elif isinstance(value, str):
        attribute.update(stringValue=value, dataType="String")
    else:
        attribute.update(stringValue=str(value), dataType="Number")
    return attribute


def _stream_record(entry: StreamRecordFields, arn: str, view: str) -> dict[str, Any]:
    new, old, name = entry["new_image"], entry["old_image"], entry["event_name"]
    if entry["ttl_removal"] and name not in (None, "REMOVE"):
        raise ValueError(f"a TTL removal is a REMOVE, not {name}")
    if name is None:
        name = "MODIFY" if new and old else "REMOVE" if old or entry["ttl_removal"] else "INSERT"
    keys = entry["keys"]
    if keys is None:
        image = new or old or {"id": "1"}
        if "id" not in image:
            raise ValueError("pass keys=: the image has no 'id' attribute to use as the key")
        keys = {"id": image["id"]}
    if new is None and old is None:
        new, old = (None, keys) if name == "REMOVE" else (keys, keys if name == "MODIFY" else None)
    change: dict[str, Any] = {
        "ApproximateCreationDateTime": int(time.time()),
        "Keys": _dynamodb_json(keys),
    }
    if new is not None and view in ("NEW_IMAGE", "NEW_AND_OLD_IMAGES"):
        change["NewImage"] = _dynamodb_json(new)
    if old is not None and view in ("OLD_IMAGE", "NEW_AND_OLD_IMAGES"):
        change["OldImage"] = _dynamodb_json(old)
    change["SequenceNumber"] = entry["sequence_number"] or next_position(STREAM_FIRST)
    change["SizeBytes"] = len(json.dumps(change["Keys"])) + sum(
        len(json.dumps(change[image])) for image in ("NewImage", "OldImage") if image in change
    )
    change["StreamViewType"] = view
    record: dict[str, Any] = {
        "eventID": entry["event_id"] or uuid.uuid4().hex,
        "eventName": name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": arn.split(":")[3],
        "dynamodb": change,
        "eventSourceARN": arn,
    }
    if entry["ttl_removal"]:
        record["userIdentity"] = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
    return record


def _dynamodb_json(item: Mapping[str, Any]) -> dict[str, Any]:
    from boto3.dynamodb.types import TypeSerializer

    serialise = TypeSerializer().serialize
    return {name: _as_sent(serialise(_no_floats(value))) for name, value in item.items()}


def _as_sent(value: Mapping[str, Any]) -> dict[str, Any]:
    """Return a serialised attribute as a stream delivers it: binary values base64-encoded."""
    ((kind, content),) = value.items()
    if kind == "B":
        return {kind: _base64_text(content)}
    if kind == "BS":
        return {kind: [_base64_text(member) for member in content]}
    if kind == "M":
        return {kind: {name: _as_sent(member) for name, member in content.items()}}
    if kind == "L":
        return {kind: [_as_sent(member) for member in content]}
    return {kind: content}


def _base64_text(value: Any) -> str:
    """Return binary content (`bytes`, or boto3's `Binary`) as base64 text."""
    return base64.b64encode(bytes(value)).decode()


def _no_floats(value: Any) -> Any:
    """Return `value` with every float made a `Decimal` (DynamoDB numbers are decimal)."""
    if isinstance(value, float):
        return decimal.Decimal(str(value))
    if isinstance(value, Mapping):
        return {name: _no_floats(item) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [_no_floats(item) for item in value]
    if isinstance(value, set | frozenset):
        return {_no_floats(item) for item in value}
    return value


def payload_bytes(payload: Any) -> bytes:
    """Return a payload's bytes: `bytes` as they are, a `str` in UTF-8, anything else as JSON."""
    if isinstance(payload, bytes | bytearray):
        return bytes(payload)
    if isinstance(payload, str):
        return payload.encode()
    return json.dumps(payload).encode()
