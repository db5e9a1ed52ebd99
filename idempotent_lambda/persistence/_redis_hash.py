"""Convert between `IdempotencyRecord` and the Redis hash that holds it, in one place.

One hash per idempotency key, named by the key itself. Fields (names configurable): ``status``,
``expiration`` (epoch seconds), ``in_progress_expiration`` (epoch milliseconds), ``data`` (UTF-8
text, or zlib bytes when ``data_encoding`` is ``zlib``), ``validation`` and ``owner``: the same
logical record as the DynamoDB item, with the same compression rule and size limit.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from idempotent_lambda.exceptions import IdempotencyPersistenceLayerError
from idempotent_lambda.persistence import _redis_scripts as scripts
from idempotent_lambda.persistence._redis_client import Arg, Commands, as_dict
from idempotent_lambda.persistence._schema import RecordSchema
from idempotent_lambda.persistence.protocol import decode_stored_data
from idempotent_lambda.record import IdempotencyRecord, Status

_STORED_STATUSES = {
    Status.IN_PROGRESS.value.encode(): Status.IN_PROGRESS,
    Status.COMPLETED.value.encode(): Status.COMPLETED,
}
_ZLIB = b"zlib"

Fields = list[bytes]
"""Field names and values, alternating, as ``HSET`` takes them."""
Args = Sequence[Arg]
"""Script arguments."""
ScriptCall = tuple[str, list[Arg]]
"""A Lua script and its ``ARGV``."""
OwnerArgs = list[Arg]
"""The arguments that fence a write on the caller's claim."""


class CorruptHashError(IdempotencyPersistenceLayerError):
    """A stored record does not follow its format; names the field, never its content."""


@dataclass(frozen=True, slots=True)
class RedisLayout(RecordSchema):
    """What the Redis layouts share: the claim script's arguments up to the record itself."""

    #: The claim script this layout runs (`_redis_scripts`).
    claim_script: ClassVar[str] = scripts.CLAIM

    def claim_call(
        self,
        record: IdempotencyRecord,
        stored_data: str | bytes | None,
        *,
        now_ms: int,
        lease_cutoff_ms: int,
        ttl: str,
    ) -> ScriptCall:
        """Return the claim script and its arguments.

        Every claim script starts with the time window and the key's TTL, then the names of the
        three attributes the claim rule reads (`persistence.base.claim_allowed`): expiry,
        status and lease end. The layout's own arguments (the new record) follow.
        """
        window: list[Arg] = [str(now_ms // 1000), str(lease_cutoff_ms), ttl]
        names = [self.expiry_attr, self.status_attr, self.in_progress_expiry_attr]
        return self.claim_script, [*window, *names, *self._claim_record(record, stored_data)]

    def _claim_record(self, record: IdempotencyRecord, stored_data: str | bytes | None) -> Args:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class HashSchema(RedisLayout):
    """Field names of the record hash, and how records map onto them."""

    #: Large results are stored zlib-compressed, as in the DynamoDB item.
    compresses = True

    def _claim_record(self, record: IdempotencyRecord, stored_data: str | bytes | None) -> Args:
        return self.to_fields(record, stored_data)

    def previous(self, idempotency_key: str, reply: Any) -> IdempotencyRecord | None:
        """Return the record a claim's reply carries (None when the key was free)."""
        fields = as_dict(reply)
        return self.from_fields(idempotency_key, fields) if fields else None

    def complete_call(
        self, record: IdempotencyRecord, stored_data: str | bytes | None, ttl: str
    ) -> ScriptCall:
        """Return the fenced completion script and its arguments."""
        args = [*self._owner_args(record.owner), ttl, *self.to_fields(record, stored_data)]
        return scripts.COMPLETE, args

    def release_call(self, owner: str) -> ScriptCall:
        """Return the fenced release script and its arguments."""
        return scripts.RELEASE, self._owner_args(owner)

    def read(self, commands: Commands, idempotency_key: str) -> IdempotencyRecord | None:
        """Read the record at ``idempotency_key`` with one ``HGETALL``."""
        fields = commands.hgetall(idempotency_key)
        return self.from_fields(idempotency_key, fields) if fields else None

    def _owner_args(self, owner: str | None) -> OwnerArgs:
        expected = "0" if owner is None else "1"
        return [self.status_attr, self.owner_attr, expected, owner or ""]

    @property
    def encoding_attr(self) -> str:
        """Return the field that says how ``data_attr`` is encoded (absent: UTF-8 text)."""
        return f"{self.data_attr}_encoding"

    def to_fields(self, record: IdempotencyRecord, stored_data: str | bytes | None) -> Fields:
        """Return the hash fields for ``record``; ``stored_data`` is its encoded result, if any."""
        fields = [self.status_attr.encode(), record.status.value.encode()]
        if record.expiry_timestamp is not None:
            fields += [self.expiry_attr.encode(), b"%d" % record.expiry_timestamp]
        if record.in_progress_expiry_timestamp is not None:
            lease_end = record.in_progress_expiry_timestamp
            fields += [self.in_progress_expiry_attr.encode(), b"%d" % lease_end]
        if isinstance(stored_data, str):
            fields += [self.data_attr.encode(), stored_data.encode("utf-8", "surrogatepass")]
        elif stored_data is not None:
            fields += [self.data_attr.encode(), stored_data, self.encoding_attr.encode(), _ZLIB]
        if record.payload_hash is not None:
            fields += [self.validation_key_attr.encode(), record.payload_hash.encode()]
        if record.owner is not None:
            fields += [self.owner_attr.encode(), record.owner.encode()]
        return fields

    def from_fields(self, idempotency_key: str, fields: Mapping[bytes, bytes]) -> IdempotencyRecord:
        """Return the record a hash holds.

        Raises:
            CorruptHashError: No status or an unknown one, a non-integer timestamp, or data that
                does not decode.
        """
        raw_status = fields.get(self.status_attr.encode())
        status = None if raw_status is None else _STORED_STATUSES.get(raw_status)
        if status is None:
            raise CorruptHashError(f"idempotency hash has no valid '{self.status_attr}' field")
        return IdempotencyRecord(
            idempotency_key=idempotency_key,
            status=status,
            expiry_timestamp=_integer(fields, self.expiry_attr),
            in_progress_expiry_timestamp=_integer(fields, self.in_progress_expiry_attr),
            response_data=self._data(fields),
            payload_hash=_text(fields, self.validation_key_attr),
            owner=_text(fields, self.owner_attr),
        )

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
            raise CorruptHashError(
                f"idempotency hash field '{self.data_attr}' does not decode"
            ) from exc
        raise CorruptHashError(f"idempotency hash field '{self.encoding_attr}' is unknown")


def _text(fields: Mapping[bytes, bytes], name: str) -> str | None:
    raw = fields.get(name.encode())
    if raw is None:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise CorruptHashError(f"idempotency hash field '{name}' is not UTF-8 text") from exc


def _integer(fields: Mapping[bytes, bytes], name: str) -> int | None:
    raw = fields.get(name.encode())
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError as exc:
        raise CorruptHashError(f"idempotency hash field '{name}' is not an integer") from exc
