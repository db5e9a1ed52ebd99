"""Record formats: how keys, validation hashes and results are written, selected by the config.

A `RecordFormat` is what a stored record looks like from the engine's side: how a payload
becomes the JSON that is hashed, how a result becomes stored text and back, which hash function
is the default and what the key prefix says when no Lambda function name is set. The stores map
the same format name onto their items (`idempotent_lambda.persistence.protocol.store_for_format`).

``native`` is this library's own format: canonical JSON hashed with sha256, results that replay
exactly (`idempotent_lambda._canonical`, `idempotent_lambda._result_codec`). ``powertools`` is
what AWS Lambda Powertools 3.x writes, so both libraries can share one table; every rule of that
format is in this module: the key is the hash of ``json.dumps(material, sort_keys=True)`` with
Powertools' encoder rules (md5 by default), the validation hash is the same over the validated
part, a result is ``json.dumps(result, sort_keys=True)`` with Decimal as its text, IN_PROGRESS is
spelled ``INPROGRESS``, and an unnamed function is ``test-func``.
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
        function_name: Returns the function-name part of the default key prefix, read now.
    """

    name: RecordFormatName
    default_hash: str
    prepare: Callable[[Any], Any]
    canonical: Callable[[Any], bytes]
    encode_result: Callable[[Any], str]
    decode_result: Callable[[str], Any]
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
    try:
        return json.dumps(value, default=_json_default, sort_keys=True)
    except RecursionError as exc:
        raise IdempotencyUnstorableResultError("result is nested too deeply to store") from exc
    except (TypeError, ValueError) as exc:
        raise IdempotencyUnstorableResultError(
            f"cannot store this result in Powertools' format ({type(exc).__name__}); "
            "return JSON-like data or pass an output_serializer"
        ) from exc


def _powertools_decode_result(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _result_codec.corrupt(exc) from exc


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
    function_name=lambda_function_name,
)

POWERTOOLS = RecordFormat(
    name="powertools",
    default_hash="md5",
    prepare=_powertools_prepare,
    canonical=_powertools_canonical,
    encode_result=_powertools_encode_result,
    decode_result=_powertools_decode_result,
    function_name=_powertools_function_name,
)

FORMATS: dict[str, RecordFormat] = {NATIVE.name: NATIVE, POWERTOOLS.name: POWERTOOLS}
