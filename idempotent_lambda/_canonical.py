"""Canonical JSON of key material: the native format's stored hashing rule.

UTF-8, non-ASCII unescaped, object keys sorted by code point, separators ``,`` and ``:``, numbers as
normalised decimal text (``1``, ``1.0`` and ``Decimal("1.00")`` all give ``1``).

`_exact`, a pure-Python encoder, is the definition. JSON-shaped data takes a faster road: one pass
makes it safe for `json` (integral floats as ints) and `json` encodes it (3.3 ms against 8.3 ms
for `_exact` on the benchmark's 170 KB body, the key + validation paths); anything that pass
cannot handle goes to `_exact`, and a property test (tests/unit/test_canonical_property.py)
keeps the two equal.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import json
import os
from collections.abc import Callable, Mapping
from typing import Any, cast

from idempotent_lambda.exceptions import IdempotencyKeyError

_PLAIN = (str, int, bool, type(None))


class _ExactEncodingNeededError(Exception):
    """The fast path met a value whose canonical form it cannot produce."""


def _refuse(value: Any) -> Any:
    raise _ExactEncodingNeededError


# No circular-reference check (3.8 ms against 4.2 ms on the large body): a cycle recurses in
# `_prepare` until RecursionError, reported as an IdempotencyKeyError.
_ENCODER = json.JSONEncoder(
    sort_keys=True,
    separators=(",", ":"),
    ensure_ascii=False,
    allow_nan=False,
    check_circular=False,
    default=_refuse,
)
_encode_string = _ENCODER.encode  # a str is encoded on its own, whatever the other options


def canonical_json(value: Any) -> str:
    """Return the canonical JSON of ``value``; `IdempotencyKeyError` if it has none (NaN, say)."""
    try:
        return _ENCODER.encode(_prepare(value))
    except (_ExactEncodingNeededError, TypeError, ValueError, RecursionError):
        return _exact(value)


def _prepare(value: Any) -> Any:
    """Return ``value`` ready for the C encoder: integral floats as ints, leaves replaced.

    Containers are copied only where something changes. Raises `_ExactEncodingNeededError` for
    what only the exact encoder renders canonically (exponent-range floats, Decimal, sets,
    non-string keys, subclasses of the JSON containers).
    """
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is float:
        return _float(value)
    if kind is dict:
        return _prepare_dict(value)
    if kind is list or kind is tuple:
        return _prepare_list(value)
    if isinstance(value, dict | list | tuple | float | set | frozenset | decimal.Decimal | Mapping):
        raise _ExactEncodingNeededError
    if isinstance(value, str | int):  # StrEnum, IntEnum: the C encoder spells them exactly
        return value
    return _prepare(_replacement(value))


def _prepare_dict(value: dict[Any, Any]) -> dict[str, Any]:
    """`_prepare` a dict's values; a copy only if one changes. Non-string keys need `_exact`."""
    copy = None
    for key, item in value.items():
        if type(key) is not str:
            raise _ExactEncodingNeededError
        if type(item) in _PLAIN:
            continue
        new = _prepare(item)
        if new is not item:
            if copy is None:
                copy = dict(value)
            copy[key] = new
    return value if copy is None else copy


def _prepare_list(value: list[Any] | tuple[Any, ...]) -> list[Any] | tuple[Any, ...]:
    """`_prepare` a list's (or tuple's) items; a list copy only if one changes."""
    items = None
    for index, item in enumerate(value):
        if type(item) in _PLAIN:
            continue
        new = _prepare(item)
        if new is not item:
            if items is None:
                items = list(value)
            items[index] = new
    return value if items is None else items


def _float(value: float) -> Any:
    magnitude = abs(value)
    if 1e-4 <= magnitude < 1e16:  # repr has no exponent in this range (False for NaN, inf)
        return int(value) if value.is_integer() else value  # "4.0" -> 4; "1.5" is canonical
    if magnitude == 0:
        return 0  # 0.0 and -0.0
    raise _ExactEncodingNeededError


def canonical_bytes(value: Any) -> bytes:
    """Return the UTF-8 bytes of `canonical_json` (lone surrogates kept, not rejected)."""
    return canonical_json(value).encode("utf-8", "surrogatepass")


def to_plain(value: Any) -> Any:
    """Turn a dataclass or pydantic model into its JSON form; leave anything else as is.

    Nothing is copied: `dataclasses.asdict` would deep-copy every field, which fails on a lock
    or a client the key never reads. A field with no JSON form stays as it is (for pydantic, a
    stand-in naming its type), and matters only if the key expression reaches it: hashing it
    then raises `IdempotencyKeyError`.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _fields(value)
    dump: Callable[..., Any] | None = getattr(value, "model_dump", None)
    if dump is not None and not isinstance(value, type):
        try:
            return dump(mode="json")
        except ValueError as exc:  # pydantic's serialisation error: a field it cannot render
            try:
                return _stand_ins(dump(mode="json", fallback=_tag))
            except TypeError:  # pydantic before 2.11 has no ``fallback``
                raise IdempotencyKeyError(
                    f"a field of the {type(value).__name__} payload has no JSON form"
                ) from exc
    return value


def _fields(value: Any) -> Any:
    """Return what `dataclasses.asdict` returns for ``value``, with the leaves not copied."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _fields(getattr(value, f.name)) for f in dataclasses.fields(value)}
    kind: Any = type(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return kind(*[_fields(item) for item in value])
    if isinstance(value, list | tuple):
        return kind(_fields(item) for item in value)
    if isinstance(value, dict):
        items = ((_fields(key), _fields(item)) for key, item in value.items())
        if hasattr(kind, "default_factory"):  # a defaultdict, rebuilt as asdict rebuilds it
            return kind(cast(Any, value).default_factory, items)
        return kind(items)
    return value


class _NoJsonForm:
    """Stands for a pydantic field value that has no JSON form; hashing it is a key error."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name


# pydantic's ``fallback`` must return something it can render, so it returns this tag and the
# type's name; `_stand_ins` turns the tags into `_NoJsonForm`. The random part keeps any real
# string from passing for a tag.
_TAG = f"\0idempotent_lambda.no-json-form.{os.urandom(8).hex()}\0"


def _tag(value: Any) -> str:
    return _TAG + type(value).__name__


def _stand_ins(value: Any) -> Any:
    if type(value) is str and value.startswith(_TAG):
        return _NoJsonForm(value[len(_TAG) :])
    if type(value) is dict:
        return {_stand_ins(key): _stand_ins(item) for key, item in value.items()}
    if type(value) is list:
        return [_stand_ins(item) for item in value]
    return value


def _replacement(value: Any) -> Any:
    """Map a non-JSON leaf to the JSON value it is hashed as."""
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if type(value).__name__ == "UUID" and type(value).__module__ == "uuid":
        return str(value)  # checked by name: importing uuid costs more than this module
    if isinstance(value, enum.Enum):
        return value.value
    plain = to_plain(value)
    if plain is not value:
        return plain
    name = value.type_name if isinstance(value, _NoJsonForm) else type(value).__name__
    raise IdempotencyKeyError(f"cannot derive an idempotency key from a value of type {name}")


def _number(value: float | decimal.Decimal) -> str:
    # float's own repr: a subclass's (numpy's float64) need not be a number.
    as_decimal = decimal.Decimal(float.__repr__(value)) if isinstance(value, float) else value
    if not as_decimal.is_finite():
        raise IdempotencyKeyError("NaN and Infinity cannot be part of an idempotency key")
    if as_decimal.is_zero():
        return "0"
    return format(as_decimal.normalize(), "f")


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool | int | float | decimal.Decimal):
        return _exact(key)
    raise IdempotencyKeyError(f"cannot use a key of type {type(key).__name__} in key material")


def _exact(value: Any) -> str:
    if isinstance(value, str):
        return _encode_string(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float | decimal.Decimal):
        if isinstance(value, enum.Enum):  # a float Enum is hashed as its value, as any Enum is
            return _exact(value.value)
        return _number(value)
    if isinstance(value, Mapping):
        return _exact_object(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(_exact(item) for item in value) + "]"
    if isinstance(value, set | frozenset):
        return "[" + ",".join(sorted(_exact(item) for item in value)) + "]"
    return _exact(_replacement(value))


def _exact_object(value: Mapping[Any, Any]) -> str:
    """`_exact` of a mapping: keys as strings (`_key`), sorted by code point; no two alike."""
    items = {_key(k): v for k, v in value.items()}
    if len(items) != len(value):
        raise IdempotencyKeyError("key material has object keys that collide as strings")
    pairs = sorted(items.items(), key=lambda item: item[0])
    return "{" + ",".join(f"{_encode_string(k)}:{_exact(v)}" for k, v in pairs) + "}"
