"""One outbox event: its id, its item in the idempotency table, its ``PutEvents`` entry.

The item is a stored format (see the Outbox guide, "The outbox item"). Its key, in the attribute
that holds idempotency keys, is ``<record key>#outbox#<event id>``: it starts with the record's
key, so an IAM ``dynamodb:LeadingKeys`` condition on ``<key prefix>#*`` covers it, and it ends
in a UUID with dashes where every idempotency key ends in ``#`` and a hexadecimal digest, so no
record can ever have it. Outbox attributes all start with ``outbox_``; an item may carry more of
them (a trace context, say) than this version reads: they are kept and ignored.
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

from idempotent_lambda.exceptions import IdempotencyCorruptRecordError, IdempotencyTransactionError

#: Between the record's key and the event id in an outbox item's key.
KEY_MARK = "#outbox#"
_KEY = re.compile(r"(?:^|#)outbox#[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
#: Namespace of the UUIDv5 event ids (a stored format: never change it).
ID_NAMESPACE = uuid.UUID("5b0c3f0e-6a43-4f4e-9d8e-0d1f6f0c7a11")
#: Where the event id goes in the published ``detail`` (read by `event_keys.OUTBOX_EVENT`).
DETAIL_KEY = "outbox"
#: ``source`` of an event emitted without one.
DEFAULT_SOURCE = "idempotent_lambda.outbox"
#: EventBridge's limit on one entry (source, detail type, detail, bus name...), in bytes.
MAX_ENTRY_BYTES = 256 * 1024
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


def event_id(record_key: str | None, position: int) -> str:
    """Return the id of the event at ``position`` of the body recorded under ``record_key``.

    The same key and position give the same id on every rerun. Without a key (the body runs
    unrecorded) the id is random: nothing deduplicates such a body anyway.
    """
    if record_key is None:
        return str(uuid.uuid4())
    return str(uuid.uuid5(ID_NAMESPACE, f"{record_key}#{position}"))


def item_key(record_key: str | None, event_id: str) -> str:
    """Return the key of an event's item: after the record's key (``outbox#...`` without one)."""
    return f"{record_key or ''}{KEY_MARK}{event_id}".removeprefix("#")


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
    """

    event_id: str
    detail_type: str
    detail: str
    source: str
    event_bus_name: str | None
    emitted_at_ms: int
    published_at_ms: int | None = None

    def attributes(self) -> dict[str, Any]:
        """Return its item's attributes (low-level form), without the key and the TTL."""
        item: dict[str, Any] = {
            ID: {"S": self.event_id},
            DETAIL_TYPE: {"S": self.detail_type},
            DETAIL: {"S": self.detail},
            SOURCE: {"S": self.source},
            EMITTED_AT: {"N": str(self.emitted_at_ms)},
        }
        if self.event_bus_name is not None:
            item[BUS] = {"S": self.event_bus_name}
        if self.published_at_ms is not None:
            item[PUBLISHED_AT] = {"N": str(self.published_at_ms)}
        return item

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> OutboxEvent:
        """Read an outbox item (low-level form).

        Raises:
            IdempotencyCorruptRecordError: An attribute is missing or of the wrong type (the
                message names it, never its content).
        """

        def text(name: str, *, required: bool = True) -> str | None:
            value = item.get(name)
            if value is None and not required:
                return None
            if not isinstance(value, Mapping) or not isinstance(value.get("S"), str):
                raise IdempotencyCorruptRecordError(f"outbox item without a string '{name}'")
            return str(value["S"])

        def number(name: str, *, required: bool = True) -> int | None:
            value = item.get(name)
            if value is None and not required:
                return None
            try:
                return int(value["N"])  # type: ignore[index]
            except (TypeError, KeyError, ValueError) as exc:
                raise IdempotencyCorruptRecordError(
                    f"outbox item without an integer '{name}'"
                ) from exc

        detail = str(text(DETAIL))
        try:
            parsed = json.loads(detail)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise IdempotencyCorruptRecordError(
                f"outbox item whose '{DETAIL}' is not a JSON object"
            )
        return cls(
            event_id=str(text(ID)),
            detail_type=str(text(DETAIL_TYPE)),
            detail=detail,
            source=str(text(SOURCE)),
            event_bus_name=text(BUS, required=False),
            emitted_at_ms=int(number(EMITTED_AT) or 0),
            published_at_ms=number(PUBLISHED_AT, required=False),
        )

    def entry(self, default_bus: str | None) -> dict[str, Any]:
        """Return its ``PutEvents`` entry: ``detail`` with the id added under ``outbox``."""
        detail = json.loads(self.detail)
        detail[DETAIL_KEY] = {"id": self.event_id}
        entry: dict[str, Any] = {
            "Source": self.source,
            "DetailType": self.detail_type,
            "Detail": json.dumps(detail, separators=(",", ":"), ensure_ascii=False),
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
    """Return an entry's size as EventBridge counts it against the 256 KB request limit."""
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
