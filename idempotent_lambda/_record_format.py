"""Record formats: how keys, validation hashes and results are written, selected by the config.

A `RecordFormat` is what a stored record looks like from the engine's side: how a payload
becomes the JSON that is hashed, how a result becomes stored text and back, which hash function
is the default and what the key prefix says when no Lambda function name is set. The stores map
the same format name onto their items (`idempotent_lambda.persistence.protocol.store_for_format`).

``powertools`` (the default) is what AWS Lambda Powertools 3.x writes, so both libraries can
share one table; every rule of that format is in this module: the key is the hash of
``json.dumps(material, sort_keys=True)`` with Powertools' encoder rules (md5 by default), the
validation hash is the same over the validated part, a result is ``json.dumps(result,
sort_keys=True)`` with Decimal as its text and never more than `MAX_STORED_DATA_BYTES`,
IN_PROGRESS is spelled ``INPROGRESS``, and an unnamed function is ``test-func``. A stored result
is always the user's data; a result that could not be stored is held as an IN_PROGRESS record
that Powertools refuses until it expires (`hold_unstorable`). ``native`` is this library's own
format: canonical JSON hashed with sha256, results that replay exactly
(`idempotent_lambda._canonical`, `idempotent_lambda._result_codec`).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import hashlib
import json
import math
import os
import pathlib
from collections.abc import Callable
from types import MappingProxyType
from typing import Any, Literal

from idempotent_lambda import _result_codec
from idempotent_lambda._canonical import canonical_bytes, to_plain
from idempotent_lambda.exceptions import IdempotencyKeyError, IdempotencyUnstorableResultError
from idempotent_lambda.record import IdempotencyRecord, Status

RecordFormatName = Literal["native", "powertools"]
"""The values ``IdempotencyConfig(record_format=...)`` accepts."""


@dataclasses.dataclass(frozen=True, slots=True)
class RecordFormat:
    """How one record format hashes key material and stores results.

    Attributes:
        name: ``"native"`` or ``"powertools"``; also the name stores know the format by.
        default_hash: The hash function when the config names none.
        prepare: Turns a decorated function's payload into the data the key is read from.
        canonical: Returns the bytes that are hashed for key or validation material.
        encode_result: Returns the stored text of a (serialised) result.
        decode_result: Inverts ``encode_result``.
        unstorable_marker: Returns the stored text that stands for a result that could not be
            stored (given why); no result's stored text is ever one.
        unstorable_reason: Returns why, when stored text is such a marker; else None.
        function_name: Returns the function-name part of the default key prefix, read now.
    """

    name: RecordFormatName
    default_hash: str
    prepare: Callable[[Any], Any]
    canonical: Callable[[Any], bytes]
    encode_result: Callable[[Any], str]
    decode_result: Callable[[str], Any]
    unstorable_marker: Callable[[str], str]
    unstorable_reason: Callable[[str], str | None]
    function_name: Callable[[], str]

    def digest(self, hash_name: str, material: Any) -> str:
        """Return the hex digest of ``material`` in this format.

        Raises:
            IdempotencyKeyError: ``material`` cannot be turned into JSON, or is nested too deeply.
        """
        try:
            data = self.canonical(material)
        except RecursionError as exc:
            raise IdempotencyKeyError("key material is nested too deeply to hash") from exc
        except (TypeError, ValueError) as exc:  # a type json refuses, a cycle, a huge int
            raise IdempotencyKeyError(f"key material cannot be hashed: {exc}") from exc
        return hashlib.new(hash_name, data).hexdigest()


def lambda_function_name() -> str:
    """Return ``AWS_LAMBDA_FUNCTION_NAME``, or ``"local"`` when it is unset or empty (native)."""
    return os.environ.get("AWS_LAMBDA_FUNCTION_NAME") or "local"


# --- Powertools' format (facts from aws_lambda_powertools 3.x, persistence/base.py) ---

POWERTOOLS_IN_PROGRESS = "INPROGRESS"
"""How Powertools spells the IN_PROGRESS status in its stored records."""
#: The most a stored result (text, or zlib bytes) may take, in every store and format. DynamoDB's
#: item limit is 400 KiB (409,600 bytes) counting attribute names and every other attribute; this
#: leaves 9,600 bytes for those: the largest keys DynamoDB allows (2,048-byte partition plus
#: 1,024-byte sort key), the names, a sha512 validation hash, the owner token and the timestamps.
#: The other stores could hold more, but apply the same limit so a result behaves the same
#: everywhere.
MAX_STORED_DATA_BYTES = 400_000
POWERTOOLS_UNSTORABLE_ATTR = "unstorable"
"""The attribute (Redis: JSON field) that holds why a held record's result was not stored."""
#: How the engine's marker of an unstorable result starts in Powertools' format: no JSON text
#: starts with ``$``, so no stored result is ever read as one.
POWERTOOLS_UNSTORABLE_START = "$unstorable:"
STATUS_CONSTANTS = MappingProxyType(
    {"INPROGRESS": POWERTOOLS_IN_PROGRESS, "COMPLETED": "COMPLETED", "EXPIRED": "EXPIRED"}
)
"""Powertools' status spellings, by name (its ``persistence.datarecord.STATUS_CONSTANTS``)."""


def _powertools_prepare(payload: Any) -> Any:
    """Return what Powertools hashes: a dataclass or pydantic model as a dict, else the payload."""
    if hasattr(payload, "__dataclass_fields__") and not isinstance(payload, type):
        return dataclasses.asdict(payload)
    dump = getattr(payload, "model_dump", None)
    if callable(dump) and not isinstance(payload, type):
        return dump(mode="json")
    as_dict = getattr(payload, "dict", None)
    if callable(as_dict) and not isinstance(payload, type):
        return as_dict()
    return getattr(payload, "raw_event", payload)


def _json_default(value: Any) -> Any:
    """Encode what Powertools' result encoder encodes beyond JSON: Decimal, models, dataclasses."""
    if isinstance(value, decimal.Decimal):
        return math.nan if value.is_nan() else str(value)
    if getattr(value, "json", False) and callable(getattr(value, "model_dump", None)):
        return value.model_dump(mode="json")
    if getattr(value, "__dataclass_fields__", False) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _key_default(value: Any) -> Any:
    """Encode key material as Powertools' key encoder does: its result rules, then a few more."""
    try:
        return _json_default(value)
    except TypeError:
        if isinstance(value, enum.Enum):
            return value.value
        if isinstance(value, datetime.date | datetime.time):
            return value.isoformat()
        import uuid  # here, not at the top: it loads platform, which every cold start would pay

        if isinstance(value, uuid.UUID | pathlib.PurePath):
            return str(value)
        raise


def _powertools_canonical(material: Any) -> bytes:
    return json.dumps(material, default=_key_default, sort_keys=True).encode()


def _powertools_encode_result(value: Any) -> str:
    """Return Powertools' text of ``value``: plain JSON, never compressed nor offloaded.

    Raises:
        IdempotencyUnstorableResultError: `json` refuses ``value`` or anything in it raises
            while it is encoded, or the text is over `MAX_STORED_DATA_BYTES`.
    """
    try:
        text = json.dumps(value, default=_json_default, sort_keys=True)
    except RecursionError as exc:
        raise IdempotencyUnstorableResultError("result is nested too deeply to store") from exc
    except Exception as exc:  # json's refusal, or a mapping or model that raises while encoded
        raise IdempotencyUnstorableResultError(
            f"cannot store this result in Powertools' format ({type(exc).__name__}); "
            "return JSON-like data or pass an output_serializer"
        ) from exc
    if len(text) > MAX_STORED_DATA_BYTES:  # ASCII (json.dumps escapes the rest): bytes = chars
        raise IdempotencyUnstorableResultError(
            f"result is {len(text)} bytes as JSON; Powertools' format stores at most "
            f"{MAX_STORED_DATA_BYTES}, as plain text (it cannot read compressed or offloaded ones)"
        )
    return text


def _powertools_decode_result(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _result_codec.corrupt(exc) from exc


def _powertools_unstorable_marker(reason: str) -> str:
    return POWERTOOLS_UNSTORABLE_START + reason


def _powertools_unstorable_reason(text: str) -> str | None:
    if not text.startswith(POWERTOOLS_UNSTORABLE_START):
        return None
    return text[len(POWERTOOLS_UNSTORABLE_START) :]


def hold_unstorable(record: IdempotencyRecord) -> tuple[IdempotencyRecord, str | None]:
    """Return how a Powertools layout stores ``record``, and why it is unstorable (or None).

    A COMPLETED record whose data is the format's unstorable marker is stored as the
    IN_PROGRESS record Powertools itself would refuse until the expiration: no data, the lease
    ending with the expiration. The reason goes into an attribute Powertools ignores, which
    `release_unstorable` reads back. Any other record is stored as it is.
    """
    data = record.response_data
    reason = None if data is None else _powertools_unstorable_reason(data)
    if record.status is not Status.COMPLETED or reason is None:
        return record, None
    expiry = record.expiry_timestamp
    held = dataclasses.replace(
        record,
        status=Status.IN_PROGRESS,
        in_progress_expiry_timestamp=None if expiry is None else (expiry + 1) * 1000,
        response_data=None,
    )
    return held, reason


def release_unstorable(record: IdempotencyRecord, reason: str | None) -> IdempotencyRecord:
    """Invert `hold_unstorable`: an IN_PROGRESS record with a reason is the marker again."""
    if reason is None or record.status is not Status.IN_PROGRESS:
        return record
    return dataclasses.replace(
        record,
        status=Status.COMPLETED,
        in_progress_expiry_timestamp=None,
        response_data=_powertools_unstorable_marker(reason),
    )


def _powertools_function_name() -> str:
    # Powertools reads the variable with a default, so an empty value stays empty.
    return os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "test-func")


NATIVE = RecordFormat(
    name="native",
    default_hash="sha256",
    prepare=to_plain,
    canonical=canonical_bytes,
    encode_result=_result_codec.encode_result,
    decode_result=_result_codec.decode_result,
    unstorable_marker=_result_codec.unstorable_marker,
    unstorable_reason=_result_codec.unstorable_reason,
    function_name=lambda_function_name,
)

POWERTOOLS = RecordFormat(
    name="powertools",
    default_hash="md5",
    prepare=_powertools_prepare,
    canonical=_powertools_canonical,
    encode_result=_powertools_encode_result,
    decode_result=_powertools_decode_result,
    unstorable_marker=_powertools_unstorable_marker,
    unstorable_reason=_powertools_unstorable_reason,
    function_name=_powertools_function_name,
)

FORMATS: dict[str, RecordFormat] = {NATIVE.name: NATIVE, POWERTOOLS.name: POWERTOOLS}
