"""JMESPath built-ins shared with Powertools so existing expressions keep working."""

from __future__ import annotations

import base64
import copy
import json
import threading
from collections.abc import Callable, Iterable
from typing import Any, cast

from jmespath import functions

from idempotent_lambda._json_text import PLAIN, JsonParser
from idempotent_lambda._limits import bounded_gunzip

_floats = threading.local()  # per parse: did every float have a plain, non-integral repr?


def _parse_float(text: str) -> float | int:
    # Integral floats ("4.0") come back as ints: equal values that the C encoder spells
    # canonically ("4"). Only the hashing path parses this way (see `track_floats`).
    number = float(text)
    if number.is_integer():
        if -1e16 < number < 1e16:
            return int(number)
    elif 1e-4 <= number < 1e16 or -1e16 < number <= -1e-4:  # repr without an exponent
        return number
    _floats.plain = False
    return number


# One parser for every parse: json.loads with a parse_float builds a new decoder each call.
_TRACKING = JsonParser(json.JSONDecoder(parse_float=_parse_float))


class BuiltinFunctions(functions.Functions):
    """``powertools_json``, ``powertools_base64`` and ``powertools_base64_gzip``.

    A fresh instance serves one invocation: ``powertools_json`` remembers the last string it
    parsed, so an event whose body is named by both the key and the validation expression is
    parsed once, and nothing parsed outlives the invocation or is shared between threads.
    """

    _last_json: tuple[str, Any] | None = None
    #: The last parsed value, when the C JSON encoder already spells it canonically (every float
    #: in it has a plain, non-integral ``repr``), so hashing it needs no normalising pass.
    canonical_root: Any = None
    #: Whether to work out `canonical_root`: it costs a Python call per float in the body, which
    #: pays off only when a whole parsed body is hashed (payload validation), not for a key field.
    #: Set only where the parsed value is used for nothing but hashing, since integral floats
    #: then parse as ints.
    track_floats: bool = False

    @functions.signature({"types": ["string"]})
    def _func_powertools_json(self, value: str) -> Any:
        last = self._last_json
        if last is not None and last[0] is value:
            return last[1]
        if not self.track_floats:
            parsed = PLAIN.parse(value)
            self._last_json = (value, parsed)
            return parsed
        _floats.plain = True
        parsed = _TRACKING.parse(value)
        self._last_json = (value, parsed)
        self.canonical_root = parsed if _floats.plain else None
        return parsed

    @functions.signature({"types": ["string"]})
    def _func_powertools_base64(self, value: str) -> str:
        return base64.b64decode(value).decode()

    @functions.signature({"types": ["string"]})
    def _func_powertools_base64_gzip(self, value: str) -> str:
        return bounded_gunzip(base64.b64decode(value)).decode()

    def call_function(self, function_name: str, resolved_args: Iterable[Any]) -> Any:
        """Call a function; the built-ins on one string skip JMESPath's generic argument checks.

        Only when the table still maps the name to our own method (a user's function of the same
        name goes through the full checks), and the argument is exactly what the signature
        accepts, so the outcome is the same as JMESPath's.
        """
        builtin = BUILTINS.get(function_name)
        if (
            builtin is not None
            and isinstance(resolved_args, list)
            and len(resolved_args) == 1
            and type(resolved_args[0]) is str
            and self.FUNCTION_TABLE[function_name]["function"] is builtin
        ):
            return builtin(self, resolved_args[0])
        return super().call_function(function_name, resolved_args)


#: The built-in methods by JMESPath name, to call directly once the arguments are checked.
BUILTINS: dict[str, Callable[..., Any]] = {
    name: BuiltinFunctions.FUNCTION_TABLE[name]["function"]
    for name in ("powertools_json", "powertools_base64", "powertools_base64_gzip")
}


def functions_factory(custom: functions.Functions | None) -> Callable[[], BuiltinFunctions]:
    """Return a factory of per-invocation Functions: the built-ins plus the user's functions.

    The user's functions win where names clash. Each call copies the user's instance (shallow), so
    whatever state it was built with is kept.
    """
    if custom is None:
        return BuiltinFunctions
    merged = type("MergedFunctions", (type(custom), BuiltinFunctions), {})

    def make() -> BuiltinFunctions:
        instance = copy.copy(custom)
        instance.__class__ = merged
        return cast(BuiltinFunctions, instance)

    return make
