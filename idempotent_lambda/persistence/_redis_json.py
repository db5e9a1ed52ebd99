"""Powertools' Redis layout: one JSON string per idempotency key, read and written in one place.

AWS Lambda Powertools 3.x keeps each record as ``SET key <json>`` with a TTL, the JSON object
holding ``status`` (``INPROGRESS`` or ``COMPLETED``), ``expiration`` (epoch seconds),
``in_progress_expiration`` (epoch milliseconds), ``validation`` and ``data`` (the result's JSON
text). This layout writes the same object, plus ``owner`` for fencing (Powertools ignores it),
with the same three Lua scripts' guarantees as the hash layout (`_redis_scripts`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from idempotent_lambda.persistence import _redis_scripts as scripts
from idempotent_lambda.persistence._redis_client import Arg, Commands
from idempotent_lambda.persistence._redis_hash import (
    Args,
    CorruptHashError,
    OwnerArgs,
    RedisLayout,
    ScriptCall,
)
from idempotent_lambda.persistence._schema import stored_status
from idempotent_lambda.persistence.protocol import POWERTOOLS_IN_PROGRESS
from idempotent_lambda.record import IdempotencyRecord, Status

_ORPHAN_LOCK_SECONDS = 10


@dataclass(frozen=True, slots=True)
class JsonSchema(RedisLayout):
    """Attribute names of the JSON record, and how records map onto it."""

    #: Results are stored as text: Powertools could not read compressed ones.
    compresses = False
    claim_script = scripts.CLAIM_JSON

    def to_value(self, record: IdempotencyRecord, stored_data: str | bytes | None) -> str:
        """Return the JSON text that holds ``record``, in Powertools' attribute order."""
        mapping: dict[str, Any] = {}
        if stored_data is not None:
            mapping[self.data_attr] = (
                stored_data if isinstance(stored_data, str) else stored_data.decode()
            )
        in_progress = record.status is Status.IN_PROGRESS
        mapping[self.status_attr] = POWERTOOLS_IN_PROGRESS if in_progress else record.status.value
        mapping[self.expiry_attr] = record.expiry_timestamp
        if record.in_progress_expiry_timestamp is not None:
            mapping[self.in_progress_expiry_attr] = record.in_progress_expiry_timestamp
        if record.payload_hash is not None:
            mapping[self.validation_key_attr] = record.payload_hash
        if record.owner is not None:
            mapping[self.owner_attr] = record.owner
        return json.dumps(mapping)

    def from_value(self, idempotency_key: str, raw: bytes) -> IdempotencyRecord:
        """Return the record a stored JSON value holds.

        Raises:
            CorruptHashError: Not a JSON object, no valid status, or an attribute of the wrong
                type. The message names the attribute, never its content.
        """
        try:
            item = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise CorruptHashError("idempotency record is not JSON") from exc
        if not isinstance(item, dict):
            raise CorruptHashError("idempotency record is not a JSON object")
        status = stored_status(item.get(self.status_attr), POWERTOOLS_IN_PROGRESS)
        if status is None:
            raise CorruptHashError(f"idempotency record has no valid '{self.status_attr}'")
        data = _text(item, self.data_attr)
        return self.record(idempotency_key, status, item, _integer, _text, data)

    def _claim_record(self, record: IdempotencyRecord, stored_data: str | bytes | None) -> Args:
        return [
            POWERTOOLS_IN_PROGRESS,
            self.to_value(record, stored_data),
            "0",  # not holding Powertools' orphan lock (see `under_orphan_lock`)
        ]

    def previous(self, idempotency_key: str, reply: Any) -> IdempotencyRecord | None:
        """Return the record a claim's reply carries (None when the key was free)."""
        return None if reply is None else self.from_value(idempotency_key, reply)

    def complete_call(
        self, record: IdempotencyRecord, stored_data: str | bytes | None, ttl: str
    ) -> ScriptCall:
        """Return the fenced completion script and its arguments."""
        args = [*self._owner_args(record.owner), ttl, self.to_value(record, stored_data)]
        return scripts.COMPLETE_JSON, args

    def release_call(self, owner: str) -> ScriptCall:
        """Return the fenced release script and its arguments."""
        return scripts.RELEASE_JSON, self._owner_args(owner)

    def read(self, commands: Commands, idempotency_key: str) -> IdempotencyRecord | None:
        """Read the record at ``idempotency_key`` with one ``GET``."""
        raw = commands.get(idempotency_key)
        return None if raw is None else self.from_value(idempotency_key, raw)

    def _owner_args(self, owner: str | None) -> OwnerArgs:
        expected = "0" if owner is None else "1"
        return [self.status_attr, self.owner_attr, POWERTOOLS_IN_PROGRESS, expected, owner or ""]


def orphan_lock_key(idempotency_key: str) -> str:
    """Return the key of Powertools' orphan lock for ``idempotency_key``.

    Before Powertools overwrites an expired or abandoned record it takes this key with
    ``SET NX`` and backs off when it exists; it never deletes the key, which lives
    `orphan_lock_seconds`. A store sharing Powertools' records takes the same key before it takes
    such a record over, so the two libraries never both do.
    """
    return f"{idempotency_key}:lock"


def orphan_lock_seconds(record: IdempotencyRecord, now_ms: int) -> int:
    """Return how long the orphan lock lives: 10 s, or the record's life when that is shorter.

    Powertools uses ``min(10, expires_after_seconds)``; the record's remaining life is that
    period.
    """
    if record.expiry_timestamp is None:
        return _ORPHAN_LOCK_SECONDS
    return max(1, min(_ORPHAN_LOCK_SECONDS, record.expiry_timestamp - now_ms // 1000))


def under_orphan_lock(args: list[Arg]) -> list[Arg]:
    """Return a `JsonSchema.claim_call`'s arguments for a caller that holds the orphan lock."""
    return [*args[:-1], "1"]


def held_by_orphan_lock(record: IdempotencyRecord, lock_end_ms: int) -> IdempotencyRecord:
    """Return the holder a claim refused by someone else's orphan lock reports.

    The lock's holder is writing its claim for the same request, so the holder is ``record``
    under no owner of ours, in progress until the lock ends: callers wait or retry as for any
    live claim.
    """
    return replace(record, owner=None, in_progress_expiry_timestamp=lock_end_ms)


def _integer(item: dict[str, Any], name: str) -> int | None:
    value = item.get(name)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CorruptHashError(f"idempotency record attribute '{name}' is not an integer")
    return value


def _text(item: dict[str, Any], name: str) -> str | None:
    value = item.get(name)
    if value is None or isinstance(value, str):
        return value
    raise CorruptHashError(f"idempotency record attribute '{name}' is not a string")
