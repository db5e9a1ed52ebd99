"""JMESPath built-ins shared with Powertools so existing expressions keep working."""

from __future__ import annotations

import base64
import copy
import gzip
import json
from collections.abc import Callable
from typing import Any

from jmespath import functions


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

    @functions.signature({"types": ["string"]})
    def _func_powertools_json(self, value: str) -> Any:
        last = self._last_json
        if last is not None and last[0] is value:
            return last[1]
        plain_floats = True

        def parse_float(text: str) -> float:
            nonlocal plain_floats
            number = float(text)
            if plain_floats and (number.is_integer() or not 1e-4 <= abs(number) < 1e16):
                plain_floats = False
            return number

        parsed = json.loads(value, parse_float=parse_float)
        self._last_json = (value, parsed)
        self.canonical_root = parsed if plain_floats else None
        return parsed

    @functions.signature({"types": ["string"]})
    def _func_powertools_base64(self, value: str) -> str:
        return base64.b64decode(value).decode()

    @functions.signature({"types": ["string"]})
    def _func_powertools_base64_gzip(self, value: str) -> str:
        return gzip.decompress(base64.b64decode(value)).decode()


def functions_factory(custom: functions.Functions | None) -> Callable[[], functions.Functions]:
    """Return a factory of per-invocation Functions: the built-ins plus the user's functions.

    The user's functions win where names clash. Each call copies the user's instance (shallow), so
    whatever state it was built with is kept.
    """
    if custom is None:
        return BuiltinFunctions
    merged = type("MergedFunctions", (type(custom), BuiltinFunctions), {})

    def make() -> functions.Functions:
        instance = copy.copy(custom)
        instance.__class__ = merged
        return instance

    return make
