"""The JMESPath functions key and validation expressions can call."""

from __future__ import annotations

import base64
import json
from typing import Any

from jmespath import functions

from idempotent_lambda._limits import bounded_gunzip
from idempotent_lambda.exceptions import IdempotencyConfigError

BUILTIN_NAMES = ("powertools_json", "powertools_base64", "powertools_base64_gzip")


class IdempotencyFunctions(functions.Functions):
    """JMESPath functions with Powertools' built-ins, so expressions written for it keep working.

    ``powertools_json`` parses JSON text, ``powertools_base64`` decodes base64 to text and
    ``powertools_base64_gzip`` decodes and gunzips it. To add functions, subclass this class (as
    Powertools users subclass ``PowertoolsFunctions``) and pass an instance as
    ``IdempotencyConfig(jmespath_options={"custom_functions": MyFunctions()})``.

    One instance serves every invocation on every thread: a subclass must keep no per-call state.

    ``powertools_json`` and ``powertools_base64`` hand a JSON object or array back unchanged, as it
    is decoded already. That is what makes ``powertools_json(body)`` work in the HTTP adapter,
    whose expressions see the request body parsed.
    """

    @functions.signature({"types": ["string", "object", "array"]})
    def _func_powertools_json(self, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    @functions.signature({"types": ["string", "object", "array"]})
    def _func_powertools_base64(self, value: Any) -> Any:
        return base64.b64decode(value).decode() if isinstance(value, str) else value

    @functions.signature({"types": ["string"]})
    def _func_powertools_base64_gzip(self, value: str) -> str:
        return bounded_gunzip(base64.b64decode(value)).decode()


def with_builtins(custom: functions.Functions | None) -> functions.Functions:
    """Return the functions instance a config evaluates its expressions with.

    An instance that already has the three built-ins (an `IdempotencyFunctions` or Powertools'
    ``PowertoolsFunctions`` subclass) is used as it is. A plain ``Functions`` subclass is combined
    with the built-ins into a new class, built once here and instantiated without arguments; its
    own functions win where names clash.

    Raises:
        IdempotencyConfigError: The plain subclass cannot be rebuilt without losing state (it
            needs constructor arguments, or its instance attributes differ from a fresh one's).
    """
    if custom is None:
        return IdempotencyFunctions()
    if all(name in custom.FUNCTION_TABLE for name in BUILTIN_NAMES):
        return custom
    cls = type(custom)
    combined = type(cls.__name__, (cls, IdempotencyFunctions), {"__module__": cls.__module__})
    try:
        instance: functions.Functions = combined()
        same_state = getattr(instance, "__dict__", {}) == getattr(custom, "__dict__", {})
    except Exception as exc:
        raise _cannot_combine(cls) from exc
    if not same_state:
        raise _cannot_combine(cls)
    return instance


def _cannot_combine(cls: type) -> IdempotencyConfigError:
    return IdempotencyConfigError(
        f"custom_functions: {cls.__name__} is a plain jmespath Functions subclass, so it is "
        "rebuilt with the built-ins by calling it without arguments, and that would not give "
        "back this instance; subclass idempotent_lambda.IdempotencyFunctions instead"
    )
