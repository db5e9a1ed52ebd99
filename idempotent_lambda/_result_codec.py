"""Serialise results for storage so that every value replays exactly.

Stored ``data`` is JSON text. Values plain JSON cannot carry are wrapped in one-key objects whose
key starts with ``$``::

    {"$decimal": "1.10"}        decimal.Decimal (exact text)
    {"$float": "nan"}           non-finite floats
    {"$bytes": "<base64>"}      bytes
    {"$tuple": [...]}           tuple
    {"$set": [...]}             set
    {"$frozenset": [...]}       frozenset
    {"$map": [[k, v], ...]}     a dict whose keys are not all strings, or include a key starting
                                with "$" (so user data can never be mistaken for a wrapper)
    {"$unstorable": "<why>"}    marker stored instead of a result that could not be stored

Everything else — ``{}``, ``[]``, ``0``, ``False``, ``""``, ``None``, nesting — is plain JSON, so
falsy results replay as themselves and not as ``None``.

Dataclass and pydantic instances, wherever they are in a result, are stored in their dict form
(``dataclasses.asdict``, ``model_dump(mode="json")``), as Powertools stores them; what is rebuilt
into instances on replay is the serializer's business (`idempotent_lambda.serialization`).
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


# Built once: `json.dumps` with any option set builds a new encoder on every call.
# No circular-reference check: a cycle already fails the walk in `encode_result` (RecursionError).
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False)


def encode_result(value: Any) -> str:
    """Return the stored text of ``value``.

    Raises:
        IdempotencyUnstorableResultError: ``value`` holds something with no stored form, or
            `json` refuses it (any exception from encoding becomes this error).
    """
    try:
        plain = value if _is_plain(value) else _wrap(value)
        return _ENCODER.encode(plain)
    except RecursionError as exc:
        raise IdempotencyUnstorableResultError("result is nested too deeply to store") from exc
    except IdempotencyUnstorableResultError:
        raise
    except Exception as exc:  # json's own refusal: an int too long to write as text (ValueError)
        raise IdempotencyUnstorableResultError(
            f"result cannot be written as JSON ({type(exc).__name__})"
        ) from exc


_SCALARS = (str, int, bool, type(None))


def _is_plain(value: Any) -> bool:
    """Tell whether ``value`` is stored as it is: JSON-shaped, nothing to wrap or escape.

    A check-only walk, cheaper than rebuilding every container through `_wrap`.
    """
    kind = type(value)
    if kind in _SCALARS:
        return True
    if kind is float:
        return math.isfinite(value)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or key[:1] == "$":
                return False
            if type(item) not in _SCALARS and not _is_plain(item):
                return False
        return True
    if kind is list:
        for item in value:  # noqa: SIM110 - a loop, not all(<genexpr>): this runs per result
            if type(item) not in _SCALARS and not _is_plain(item):
                return False
        return True
    return False


def decode_result(text: str) -> Any:
    """Invert `encode_result`.

    Raises:
        IdempotencyPersistenceLayerError: ``text`` is not a stored result (a corrupt record).
    """
    try:
        # Only text holding a '"$' can hold a wrapper: the rest needs no object hook.
        return json.loads(text, object_hook=_unwrap) if '"$' in text else json.loads(text)
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
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: _wrap(v) for k, v in value.items()}
        return {"$map": [[_wrap(k), _wrap(v)] for k, v in value.items()]}
    if isinstance(value, list):
        return [_wrap(item) for item in value]
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


def _hashable(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key
