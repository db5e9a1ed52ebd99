"""The outbox's stored format: an event, its id, its item's key and attributes, its entry.

It imports only the errors and the standard library, so the stores read it without loading the
outbox; the DynamoDB store maps items onto `OutboxEvent` (`persistence/dynamodb/_outbox.py`).
The item is a stored format (see the Outbox guide, "The outbox item"). Its key, in the attribute
that holds idempotency keys, is ``<record key>#outbox#<slot>`` (``<key prefix>#outbox#<slot>``
for a body run without a record): it starts with the record's key, so an IAM
``dynamodb:LeadingKeys`` condition on ``<key prefix>#*`` covers it, and it ends in a UUID with
dashes where every idempotency key ends in ``#`` and a hexadecimal digest, so no record can ever
have it. The slot is drawn from the claim that emits the event (its owner token and the event's
position), and the event's id is computed from the item's whole primary key (`event_id`): nobody
who cannot write under the record's key can make an item that carries its ids. Outbox attributes
all start with ``outbox_``; an item may carry more of them than this version reads: they are
kept and ignored.
"""

from __future__ import annotations

import datetime
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from idempotent_lambda.exceptions import IdempotencyTransactionError

#: Between the record's key and the slot in an outbox item's key.
KEY_MARK = "#outbox#"
_KEY = re.compile(r"(?:^|#)outbox#[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
#: Namespace of the UUIDv5 event ids (a stored format: never change it).
ID_NAMESPACE = uuid.UUID("5b0c3f0e-6a43-4f4e-9d8e-0d1f6f0c7a11")
#: Namespace of the UUIDv5 slots of a claim's events (a stored format: never change it).
SLOT_NAMESPACE = uuid.UUID("0c7e44d2-31b6-4a5e-8f0e-6c2b9d1e5a37")
#: Where the event id goes in the published ``detail``, under which name, and the SQS message
#: field that carries the event when a rule targets a queue (`event_keys.OUTBOX_EVENT` and the
#: SQS adapter read these).
DETAIL_KEY, ID_FIELD, QUEUE_BODY = "outbox", "id", "body"
#: The publisher's EMF metric (unit Seconds) to alarm on: the oldest event a batch found
#: unpublished.
AGE_METRIC = "OutboxOldestUnpublishedAge"
#: ``source`` of an event emitted without one.
DEFAULT_SOURCE = "idempotent_lambda.outbox"
#: EventBridge's limit on one entry (time, source, detail type, detail), in bytes.
MAX_ENTRY_BYTES = 256 * 1024
#: EventBridge's limits on ``DetailType`` and ``Source`` (characters); ``aws.`` sources are AWS's.
MAX_DETAIL_TYPE, MAX_SOURCE, AWS_SOURCE_PREFIX = 128, 256, "aws."
#: What a publisher may add to a stored detail besides the id: ``,"traceparent":"<55>"``.
TRACE_RESERVE_BYTES = len(',"traceparent":""') + 55
#: The sparse index of unpublished items (see `PENDING`), and its shards per key prefix.
OUTBOX_INDEX, PENDING_SHARDS = "outbox-unpublished", 4
#: How long an unpublished outbox item is kept (TTL), and a published one after publishing:
#: past a stream's 24-hour retention no record can bring it back to the publisher.
RETENTION_SECONDS = 7 * 24 * 3600
PUBLISHED_RETENTION_SECONDS = 25 * 3600

ID, DETAIL_TYPE, DETAIL, SOURCE, BUS, EMITTED_AT, PUBLISHED_AT = (
    "outbox_id",
    "outbox_detail_type",
    "outbox_detail",
    "outbox_source",
    "outbox_event_bus",
    "outbox_emitted_at",
    "outbox_published_at",
)
#: The W3C ``traceparent`` of the span that emitted the event (docs/tracing.md), when traced.
TRACE_PARENT = "outbox_traceparent"
#: Present only while the item is unpublished (the mark removes it): the partition key of the
#: sparse index `OUTBOX_INDEX`, ``<key prefix>#<shard>`` (``static_pk_value#<shard>`` in
#: composite-key mode), sorted by `EMITTED_AT`.
PENDING = "outbox_pending"
#: Emit times outside this range (epoch milliseconds) make an item unreadable.
LATEST_EMIT_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}\Z")


def slot(claim: str, position: int) -> str:
    """Return the item-key part of the event at ``position`` of the body run under ``claim``.

    ``claim`` is the claim's owner token: the same for every invocation of one claim (a
    durable execution's), new for each new claim, so a body run again after its record expired
    writes new items.
    """
    return str(uuid.uuid5(SLOT_NAMESPACE, f"{claim}#{position}"))


def item_key(owner_key: str | None, slot: str) -> str:
    """Return an event item's key: the record's key (or key prefix), ``#outbox#``, the slot."""
    return f"{owner_key or ''}{KEY_MARK}{slot}".removeprefix("#")


def event_id(key: Mapping[str, Any]) -> str:
    """Return the id of the event stored at ``key``, its item's primary key (low-level form).

    The id is computed from the whole key, never read from the item: an item under another
    key can never carry it.
    """
    text = json.dumps(key, sort_keys=True, separators=(",", ":"))
    return str(uuid.uuid5(ID_NAMESPACE, text))


def key_ident(key: Mapping[str, Any]) -> str:
    """Return an item's primary key (low-level form) as one comparable string."""
    return json.dumps(key, sort_keys=True)


def pending_value(unit: str, slot: str) -> str:
    """Return `PENDING` of an item of ``unit`` (key prefix or partition) and ``slot``."""
    return f"{unit}#{int(slot[0], 16) % PENDING_SHARDS}"


def trace_parent_or_none(value: object) -> str | None:
    """Return ``value`` if it is a W3C ``traceparent`` (55 characters, lowercase hex); else None."""
    if isinstance(value, str) and len(value) == 55 and _TRACEPARENT.match(value):
        return value if not value.startswith("ff") else None
    return None


def is_outbox_key(key: object) -> bool:
    """Tell whether an idempotency-key attribute's value is an outbox item's key."""
    return isinstance(key, str) and _KEY.search(key) is not None


@dataclass(frozen=True, slots=True)
class OutboxEvent:
    """An event as the outbox keeps it.

    Attributes:
        event_id: Its id (published in ``detail.outbox.id``).
        detail_type: EventBridge ``DetailType``.
        detail: The ``detail`` as the body gave it, as JSON text (without the id).
        source: EventBridge ``Source``.
        event_bus_name: The bus; None: the publisher's default.
        emitted_at_ms: When the body's transaction was built (epoch milliseconds).
        published_at_ms: When the publisher recorded it as published; None until then.
        trace_parent: The W3C ``traceparent`` of the span that emitted it; None untraced.
    """

    event_id: str
    detail_type: str
    detail: str
    source: str
    event_bus_name: str | None
    emitted_at_ms: int
    published_at_ms: int | None = None
    trace_parent: str | None = None

    def entry(self, default_bus: str | None, trace_parent: str | None = None) -> dict[str, Any]:
        """Return its ``PutEvents`` entry: ``detail`` with the id added under ``outbox``.

        The trace context goes beside the id (``traceparent``): ``trace_parent`` (the
        publication's), else the one the event was emitted with. The field is added to the
        stored text as it is, which is a JSON object without an ``outbox`` field (`detail_text`
        and the stores' readers make sure of it): the detail is never parsed or serialised again.
        """
        outbox = {ID_FIELD: self.event_id}
        if trace_parent or self.trace_parent:
            outbox["traceparent"] = str(trace_parent or self.trace_parent)
        head = self.detail.rstrip()[:-1].rstrip()
        field = json.dumps({DETAIL_KEY: outbox}, separators=(",", ":"))[1:]
        detail = head + ("" if head.endswith("{") else ",") + field
        entry: dict[str, Any] = {
            "Source": self.source,
            "DetailType": self.detail_type,
            "Detail": detail,
            "Time": datetime.datetime.fromtimestamp(
                self.emitted_at_ms / 1000, tz=datetime.timezone.utc
            ),
        }
        bus = self.event_bus_name or default_bus
        if bus:
            entry["EventBusName"] = bus
        return entry


def detail_text(detail: object) -> str:
    """Return ``detail`` as the JSON text the outbox keeps.

    Raises:
        IdempotencyTransactionError: It is not a JSON object (EventBridge's ``detail`` is one),
            it holds a value JSON cannot carry, or it uses the reserved ``outbox`` field.
    """
    if not isinstance(detail, Mapping):
        raise IdempotencyTransactionError(
            f"emit: detail must be a mapping (EventBridge's detail is a JSON object), "
            f"got a {type(detail).__name__}"
        )
    if DETAIL_KEY in detail:
        raise IdempotencyTransactionError(
            f"emit: detail['{DETAIL_KEY}'] is reserved for the event id"
        )
    try:
        return json.dumps(
            detail, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_number
        )
    except (TypeError, ValueError) as exc:
        raise IdempotencyTransactionError(
            f"emit: detail holds a value JSON cannot carry ({type(exc).__name__})"
        ) from exc


def entry_size(entry: Mapping[str, Any]) -> int:
    """Return an entry's size as EventBridge counts it against the 256 KB request limit.

    The bus name is counted too, which EventBridge does not: a request never comes out larger
    than EventBridge measures it.
    """
    size = 14  # Time
    for name in ("Source", "DetailType", "Detail", "EventBusName"):
        value = entry.get(name)
        if value:
            size += len(str(value).encode("utf-8"))
    return size


def _number(value: Any) -> Any:
    if isinstance(value, Decimal) and value.is_finite():
        return int(value) if value == value.to_integral_value() else float(value)
    raise TypeError(type(value).__name__)
