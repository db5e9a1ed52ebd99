"""Canonical JSON of key material: the stored hashing format (DESIGN §7a).

UTF-8, non-ASCII unescaped, object keys sorted by code point, separators ``,`` and ``:``, numbers as
normalised decimal text (``1``, ``1.0`` and ``Decimal("1.00")`` all give ``1``). The common case is
encoded by the C JSON encoder; anything it would render differently from the canonical form falls
back to an exact pure-Python encoder, and a property test keeps the two identical.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from idempotent_lambda.exceptions import IdempotencyKeyError

# Text the C encoder may have rendered differently from the canonical form, so the exact encoder
# must redo it: a JSON number token (the whole text, or after , : or [ and before , ] or }) from a
# float in a non-canonical spelling, an integral float ("1.0") or an exponent form ("1e+20"); or an
# object key that may come from a non-string key (the C encoder sorts those by value, not by code
# point, and spells float keys with repr). Such characters inside a string only cost a detour.
_NON_CANONICAL = re.compile(
    r"(?:^|[:,\[])-?\d+(?:\.0|(?:\.\d+)?e[+-]\d+)(?:[,\]}]|$)"
    r'|[{,]"(?:-?\d[^"]*|true|false|null)":'
)
_encode_string = json.encoder.encode_basestring


class _ExactEncodingNeededError(Exception):
    """The fast path met a value whose canonical form it cannot produce."""


def canonical_json(value: Any) -> str:
    """Return the canonical JSON text of ``value``.

    Raises:
        IdempotencyKeyError: ``value`` holds NaN/Infinity or a type with no canonical form.
    """
    try:
        text = json.dumps(
            value,
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
            default=_fast_default,
        )
    except (_ExactEncodingNeededError, TypeError, ValueError):
        # TypeError: mixed-type dict keys; ValueError: NaN (re-checked, and reported, below).
        return _exact(value)
    if _NON_CANONICAL.search(text) is None:
        return text
    return _exact(value)


def canonical_bytes(value: Any) -> bytes:
    """Return the UTF-8 bytes of `canonical_json` (lone surrogates kept, not rejected)."""
    return canonical_json(value).encode("utf-8", "surrogatepass")


def to_plain(value: Any) -> Any:
    """Turn a dataclass or pydantic model into its JSON form; leave anything else as is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    dump: Callable[..., Any] | None = getattr(value, "model_dump", None)
    if dump is not None and not isinstance(value, type):
        return dump(mode="json")
    return value


def _fast_default(value: Any) -> Any:
    if isinstance(value, decimal.Decimal | float | set | frozenset | Mapping):
        raise _ExactEncodingNeededError
    return _replacement(value)


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
    raise IdempotencyKeyError(
        f"cannot derive an idempotency key from a value of type {type(value).__name__}"
    )


def _number(value: float | decimal.Decimal) -> str:
    as_decimal = decimal.Decimal(repr(value)) if isinstance(value, float) else value
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
        return str(_encode_string(value))
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float | decimal.Decimal):
        return _number(value)
    if isinstance(value, Mapping):
        items = {_key(k): v for k, v in value.items()}
        if len(items) != len(value):
            raise IdempotencyKeyError("key material has object keys that collide as strings")
        pairs = sorted(items.items(), key=lambda item: item[0])
        return "{" + ",".join(f"{_encode_string(k)}:{_exact(v)}" for k, v in pairs) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_exact(item) for item in value) + "]"
    if isinstance(value, set | frozenset):
        return "[" + ",".join(sorted(_exact(item) for item in value)) + "]"
    return _exact(_replacement(value))
