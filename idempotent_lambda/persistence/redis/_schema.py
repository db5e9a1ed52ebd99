"""The two Redis layouts of a record: our hash, and Powertools' JSON string.

Each layout names its scripts and its read command, and converts records to the script
arguments and back; the store sends them. The Redis and shared-tables guides describe the
two formats.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from idempotent_lambda._record_format import (
    POWERTOOLS_UNSTORABLE_ATTR,
    hold_unstorable,
    release_unstorable,
)
from idempotent_lambda.exceptions import IdempotencyCorruptRecordError
from idempotent_lambda.persistence._schema import RecordSchema, stored_status
from idempotent_lambda.persistence.protocol import (
    POWERTOOLS_IN_PROGRESS,
    decode_stored_data,
    encode_stored_data,
)
from idempotent_lambda.persistence.redis import _commands as scripts
from idempotent_lambda.persistence.redis._commands import Arg
from idempotent_lambda.record import IdempotencyRecord, Status

_ZLIB = b"zlib"
_ORPHAN_LOCK_SECONDS = 10


@dataclass(frozen=True, slots=True)
class HashSchema(RecordSchema):
    """One hash per key; a result over the threshold is stored zlib-compressed."""

    claim_script: ClassVar[str] = scripts.CLAIM
    complete_script: ClassVar[str] = scripts.COMPLETE
    release_script: ClassVar[str] = scripts.RELEASE
    read_command: ClassVar[str] = "HGETALL"
    in_progress: ClassVar[str] = Status.IN_PROGRESS.value
    #: Whether an expired or abandoned record is taken over only under Powertools' orphan lock.
    orphan_lock: ClassVar[bool] = False

    @property
    def encoding_attr(self) -> str:
        """Return the field that says how ``data_attr`` is encoded (absent: UTF-8 text)."""
        return f"{self.data_attr}_encoding"

    def encode(self, record: IdempotencyRecord, compression_threshold: int) -> list[Arg]:
        """Return the hash fields of ``record``, names and values alternating as ``HSET`` takes.

        Raises:
            IdempotencyUnstorableResultError: The result is too large, even compressed.
        """
        fields: list[Arg] = [self.status_attr, record.status.value]
        if record.expiry_timestamp is not None:
            fields += [self.expiry_attr, str(record.expiry_timestamp)]
        if record.in_progress_expiry_timestamp is not None:
            fields += [self.in_progress_expiry_attr, str(record.in_progress_expiry_timestamp)]
        if record.response_data is not None:
            data = encode_stored_data(
                record.response_data, compression_threshold=compression_threshold
            )
            if isinstance(data, str):
                fields += [self.data_attr, data.encode("utf-8", "surrogatepass")]
            else:
                fields += [self.data_attr, data, self.encoding_attr, _ZLIB]
        if record.payload_hash is not None:
            fields += [self.validation_key_attr, record.payload_hash]
        if record.owner is not None:
            fields += [self.owner_attr, record.owner]
        return fields

    def decode(self, idempotency_key: str, reply: Any) -> IdempotencyRecord | None:
        """Return the record an ``HGETALL`` reply holds (a RESP3 map or a flat list); None if empty.

        Raises:
            IdempotencyCorruptRecordError: No valid status, a non-integer timestamp, or data
                that does not decode.
        """
        if isinstance(reply, Mapping):
            fields = dict(reply)
        else:
            items = list(reply or ())
            fields = dict(zip(items[::2], items[1::2], strict=True))
        if not fields:
            return None
        raw_status = fields.get(self.status_attr.encode())
        text = None if raw_status is None else raw_status.decode(errors="replace")
        status = stored_status(text, self.in_progress)
        if status is None:
            raise IdempotencyCorruptRecordError(
                f"idempotency hash has no valid '{self.status_attr}' field"
            )
        data = self._data(fields)
        return self.record(idempotency_key, status, fields, _hash_integer, _hash_text, data)

    def _data(self, fields: Mapping[bytes, bytes]) -> str | None:
        raw = fields.get(self.data_attr.encode())
        if raw is None:
            return None
        encoding = fields.get(self.encoding_attr.encode())
        try:
            if encoding is None:
                return raw.decode("utf-8", "surrogatepass")
            if encoding == _ZLIB:
                return decode_stored_data(raw)
        except (zlib.error, UnicodeDecodeError) as exc:
            raise IdempotencyCorruptRecordError(
                f"idempotency hash field '{self.data_attr}' does not decode"
            ) from exc
        raise IdempotencyCorruptRecordError(
            f"idempotency hash field '{self.encoding_attr}' is unknown"
        )


@dataclass(frozen=True, slots=True)
class JsonSchema(RecordSchema):
    """Powertools' layout: one JSON string per key, its result never compressed.

    Adds ``owner``, which Powertools ignores, so our completion and release stay fenced, and
    holds an unstorable result's marker as `hold_unstorable` says (its reason in the
    ``unstorable`` field).
    """

    claim_script: ClassVar[str] = scripts.CLAIM_JSON
    complete_script: ClassVar[str] = scripts.COMPLETE_JSON
    release_script: ClassVar[str] = scripts.RELEASE_JSON
    read_command: ClassVar[str] = "GET"
    in_progress: ClassVar[str] = POWERTOOLS_IN_PROGRESS
    orphan_lock: ClassVar[bool] = True

    def encode(self, record: IdempotencyRecord, compression_threshold: int) -> list[Arg]:
        """Return the JSON text of ``record``, in Powertools' attribute order, as one argument.

        ``compression_threshold`` is ignored: Powertools cannot read compressed results.
        """
        record, reason = hold_unstorable(record)
        item: dict[str, Any] = {}
        if record.response_data is not None:
            item[self.data_attr] = record.response_data
        in_progress = record.status is Status.IN_PROGRESS
        item[self.status_attr] = self.in_progress if in_progress else record.status.value
        item[self.expiry_attr] = record.expiry_timestamp
        if record.in_progress_expiry_timestamp is not None:
            item[self.in_progress_expiry_attr] = record.in_progress_expiry_timestamp
        if record.payload_hash is not None:
            item[self.validation_key_attr] = record.payload_hash
        if record.owner is not None:
            item[self.owner_attr] = record.owner
        if reason is not None:
            item[POWERTOOLS_UNSTORABLE_ATTR] = reason
        return [json.dumps(item)]

    def decode(self, idempotency_key: str, reply: Any) -> IdempotencyRecord | None:
        """Return the record a ``GET`` reply holds; None when there is none.

        Raises:
            IdempotencyCorruptRecordError: Not a JSON object, no valid status, or an attribute
                of the wrong type.
        """
        if reply is None:
            return None
        try:
            item = json.loads(reply)
        except (ValueError, RecursionError) as exc:
            raise IdempotencyCorruptRecordError("idempotency record is not JSON") from exc
        if not isinstance(item, dict):
            raise IdempotencyCorruptRecordError("idempotency record is not a JSON object")
        status = stored_status(item.get(self.status_attr), self.in_progress)
        if status is None:
            raise IdempotencyCorruptRecordError(
                f"idempotency record has no valid '{self.status_attr}'"
            )
        data = _json_text(item, self.data_attr)
        record = self.record(idempotency_key, status, item, _json_integer, _json_text, data)
        return release_unstorable(record, _json_text(item, POWERTOOLS_UNSTORABLE_ATTR))


def orphan_lock_key(idempotency_key: str) -> str:
    """Return the key of Powertools' orphan lock for ``idempotency_key``.

    Powertools takes it with ``SET NX`` before it overwrites an expired or abandoned record, and
    never deletes it; under the JSON layout this store takes it too.
    """
    return f"{idempotency_key}:lock"


def orphan_lock_seconds(record: IdempotencyRecord, now_ms: int) -> int:
    """Return the lock's life: 10 s, or ``record``'s remaining life when shorter (as Powertools)."""
    if record.expiry_timestamp is None:
        return _ORPHAN_LOCK_SECONDS
    return max(1, min(_ORPHAN_LOCK_SECONDS, record.expiry_timestamp - now_ms // 1000))


def _hash_text(fields: Mapping[bytes, bytes], name: str) -> str | None:
    raw = fields.get(name.encode())
    if raw is None:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise IdempotencyCorruptRecordError(
            f"idempotency hash field '{name}' is not UTF-8 text"
        ) from exc


def _hash_integer(fields: Mapping[bytes, bytes], name: str) -> int | None:
    raw = fields.get(name.encode())
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError as exc:
        raise IdempotencyCorruptRecordError(
            f"idempotency hash field '{name}' is not an integer"
        ) from exc


def _json_integer(item: dict[str, Any], name: str) -> int | None:
    value = item.get(name)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise IdempotencyCorruptRecordError(
            f"idempotency record attribute '{name}' is not an integer"
        )
    return value


def _json_text(item: dict[str, Any], name: str) -> str | None:
    value = item.get(name)
    if value is None or isinstance(value, str):
        return value
    raise IdempotencyCorruptRecordError(f"idempotency record attribute '{name}' is not a string")
