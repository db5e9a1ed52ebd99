"""Serialise results for storage so that every value replays exactly (the native format).

Stored ``data`` is JSON text. Values plain JSON cannot carry are wrapped in one-key objects whose
key starts with ``$``:

| stored | stands for |
| --- | --- |
| ``{"$decimal": "1.10"}`` | `decimal.Decimal` (exact text) |
| ``{"$float": "nan"}`` | a non-finite float |
| ``{"$bytes": "<base64>"}`` | bytes |
| ``{"$tuple": [...]}``, ``{"$set": [...]}``, ``{"$frozenset": [...]}`` | those containers |
| ``{"$map": [[k, v], ...]}`` | a dict with a key that is not a string or starts with ``$`` |
| ``{"$unstorable": "<why>"}`` | the marker stored instead of a result that could not be |

Everything else (``{}``, ``[]``, ``0``, ``False``, ``""``, ``None``, nesting) is plain JSON, so
falsy results replay as themselves and not as ``None``. Dataclass and pydantic instances are
stored in their dict form, as Powertools stores them; rebuilding instances on replay is the
serializer's business (`idempotent_lambda.serialization`).
"""

from __future__ import annotations

import base64
import dataclasses
import decimal
import json
import math
from typing import Any

from idempotent_lambda.exceptions import (
    IdempotencyPersistenceLayerError,
    IdempotencyUnstorableResultError,
)

UNSTORABLE_TAG = "$unstorable"
#: How every unstorable-result marker starts (no result that starts otherwise is one).
UNSTORABLE_START = '{"' + UNSTORABLE_TAG
#: What decoding a damaged stored result raises: bad JSON, base64, UTF-8 or numbers
#: (ValueError, ArithmeticError), wrapper contents of the wrong shape (TypeError), too deep.
_NOT_DECODABLE = (ValueError, TypeError, ArithmeticError, RecursionError)
_TAGS = frozenset(
    {"$decimal", "$float", "$bytes", "$tuple", "$set", "$frozenset", "$map", UNSTORABLE_TAG}
)


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def encode_result(value: Any) -> str:
    """Return the stored text of ``value``.

    Raises:
        IdempotencyUnstorableResultError: ``value`` holds something with no stored form, or
            `json` refuses it (any exception from encoding becomes this error).
    """
    try:
        return _ENCODER.encode(_wrap(value))
    except RecursionError as exc:
        raise IdempotencyUnstorableResultError("result is nested too deeply to store") from exc
    except IdempotencyUnstorableResultError:
        raise
    except Exception as exc:  # json's own refusal: an int too long to write as text (ValueError)
        raise IdempotencyUnstorableResultError(
            f"result cannot be written as JSON ({type(exc).__name__})"
        ) from exc


def decode_result(text: str) -> Any:
    """Invert `encode_result`; `IdempotencyPersistenceLayerError` for a corrupt record."""
    try:
        return _DECODER.decode(text)
    except _NOT_DECODABLE as exc:
        raise corrupt(exc) from exc


def unstorable_marker(reason: str) -> str:
    """Return the stored text that stands for a result that could not be stored."""
    return json.dumps({UNSTORABLE_TAG: reason}, separators=(",", ":"))


def unstorable_reason(text: str) -> str | None:
    """Return the reason when ``text`` is an unstorable-result marker, else None."""
    if not text.startswith(UNSTORABLE_START):
        return None
    try:
        return str(json.loads(text)[UNSTORABLE_TAG])
    except (*_NOT_DECODABLE, KeyError) as exc:
        raise corrupt(exc) from exc


def corrupt(exc: BaseException) -> IdempotencyPersistenceLayerError:
    """Return the error for a stored result that does not decode (a corrupt record)."""
    return IdempotencyPersistenceLayerError(
        f"the stored result does not decode ({type(exc).__name__}): the record is corrupt"
    )


def _wrap(value: Any) -> Any:
    if value is None or isinstance(value, (str, int)):  # bool is an int
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str) or key.startswith("$"):
                return {"$map": [[_wrap(k), _wrap(v)] for k, v in value.items()]}
        return {key: _wrap(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_wrap(item) for item in value]
    return _wrap_tagged(value)


def _wrap_tagged(value: Any) -> Any:
    """Wrap what JSON cannot say as itself: a tagged object, or a model's dict form."""
    if isinstance(value, decimal.Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, tuple):
        return {"$tuple": [_wrap(item) for item in value]}
    if isinstance(value, frozenset):
        return {"$frozenset": [_wrap(item) for item in value]}
    if isinstance(value, set):
        return {"$set": [_wrap(item) for item in value]}
    if isinstance(value, bytes | bytearray):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if not isinstance(value, type):
        if dataclasses.is_dataclass(value):
            return _wrap(_dict_form(dataclasses.asdict, value))
        dump = getattr(value, "model_dump", None)
        if callable(dump):
            return _wrap(_dict_form(lambda _: dump(mode="json"), value))
    raise IdempotencyUnstorableResultError(
        f"cannot store a result of type {type(value).__name__}; "
        "return JSON-like data or pass an output_serializer"
    )


def _dict_form(convert: Any, value: Any) -> Any:
    """Return a model's dict form; a model that cannot be converted is unstorable."""
    try:
        return convert(value)
    except RecursionError:
        raise
    except Exception as exc:
        raise IdempotencyUnstorableResultError(
            f"cannot convert a {type(value).__name__} result to its dict form: {type(exc).__name__}"
        ) from exc


def _unwrap(obj: dict[str, Any]) -> Any:
    if len(obj) != 1:
        return obj
    ((tag, inner),) = obj.items()
    if tag not in _TAGS:
        return obj
    if tag == "$decimal":
        return decimal.Decimal(inner)
    if tag == "$float":
        return float(inner)
    if tag == "$bytes":
        return base64.b64decode(inner, validate=True)
    if tag == "$tuple":
        return tuple(inner)
    if tag == "$set":
        return set(inner)
    if tag == "$frozenset":
        return frozenset(inner)
    if tag == "$map":
        return {_hashable(k): v for k, v in inner}
    return obj


_DECODER = json.JSONDecoder(object_hook=_unwrap)  # built once, as `json.loads` would per call


def _hashable(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key
