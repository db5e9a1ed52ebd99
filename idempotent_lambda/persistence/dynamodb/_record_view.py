"""What an operator sees of a stored record: its status as stored, and its result decoded.

`OperatorMethods.read` returns it, so a tool such as the CLI lays a record out without knowing
how either record format stores a result, or how an offloaded one is referenced.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from idempotent_lambda._record_format import FORMATS, POWERTOOLS_IN_PROGRESS, RecordFormatName
from idempotent_lambda.exceptions import IdempotencyPersistenceLayerError
from idempotent_lambda.persistence.dynamodb import _s3
from idempotent_lambda.record import IdempotencyRecord, Status

__all__ = ["RecordView"]


@dataclass(frozen=True, slots=True)
class RecordView:
    """A stored record decoded for an operator; nothing is fetched from S3.

    Attributes:
        record: The record; an offloaded result stays its reference.
        stored_status: The status as the table spells it under the record format read with
            (IN_PROGRESS is ``INPROGRESS`` in Powertools' format).
        result: The decoded result; None when there is none, or it is offloaded or unstored.
        offloaded: Where an offloaded result lives (``bucket``, ``key``, ``size``,
            ``sha256``; only ``malformed`` for a reference that does not parse); None when the
            result is not offloaded (the native format only offloads).
        unstorable_reason: Why the result could not be stored (the native format); else None.
    """

    record: IdempotencyRecord
    stored_status: str
    result: Any = None
    offloaded: Mapping[str, Any] | None = None
    unstorable_reason: str | None = None

    @classmethod
    def of(cls, record: IdempotencyRecord, record_format: RecordFormatName) -> RecordView:
        """Decode ``record`` as a function with ``record_format`` stored it."""
        stored = record.status.value
        if record.status is Status.IN_PROGRESS and record_format != "native":
            stored = POWERTOOLS_IN_PROGRESS
        data = record.response_data
        if data is None:
            return cls(record, stored)
        if record_format != "native":
            return cls(record, stored, FORMATS[record_format].decode_result(data))
        offloaded = _offload_reference(data)
        if offloaded is not None:
            return cls(record, stored, offloaded=offloaded)
        reason = FORMATS["native"].unstorable_reason(data)
        if reason is not None:
            return cls(record, stored, unstorable_reason=reason)
        return cls(record, stored, FORMATS["native"].decode_result(data))


def _offload_reference(data: str) -> dict[str, Any] | None:
    """Return where an offloaded result lives, when ``data`` is an S3 reference; else None."""
    if not _s3.is_reference(data):
        return None
    try:
        bucket, key, sha256, size = _s3.parse_reference(data)
    except IdempotencyPersistenceLayerError:
        return {"malformed": True}
    return {"bucket": bucket, "key": key, "size": size, "sha256": sha256}
