"""Compiled JMESPath expressions with a fast path for the shapes keys are made of.

Idempotency keys are almost always field paths and built-in calls (``order_id``,
``powertools_json(body).payment_id``). Those compile here to plain closures, which skip the
interpreter's visitor dispatch; anything else is evaluated by JMESPath itself. Both give the same
result: a closure only exists for node types whose semantics it reproduces exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jmespath
from jmespath import functions

from idempotent_lambda._jmespath_functions import BUILTINS, BuiltinFunctions

_Closure = Callable[[Any, functions.Functions], Any]


class CompiledExpression:
    """A parsed JMESPath expression; ``search`` takes the fast path when there is one.

    Attributes:
        expression: The source text.
        parsed: JMESPath's AST (dicts with ``type``, ``value``, ``children``).
    """

    __slots__ = ("_fast", "_parsed_result", "expression", "parsed", "search_with")

    def __init__(self, expression: str) -> None:
        self._parsed_result = jmespath.compile(expression)
        self.expression = expression
        self.parsed: dict[str, Any] = dict(self._parsed_result.parsed)
        self._fast = _compile(self.parsed)
        #: ``search_with(value, custom_functions)``: evaluate with these functions (no
        #: `jmespath.Options`); the fast path's closure itself when there is one.
        self.search_with: _Closure = self._fast or self._interpret

    def search(self, value: Any, options: jmespath.Options | None = None) -> Any:
        """Evaluate the expression on ``value`` (same result as ``jmespath.search``)."""
        custom = None if options is None else options.custom_functions
        if self._fast is not None and custom is not None:
            return self._fast(value, custom)
        return self._parsed_result.search(value, options=options)

    def _interpret(self, value: Any, custom_functions: functions.Functions) -> Any:
        return self._parsed_result.search(
            value, options=jmespath.Options(custom_functions=custom_functions)
        )


def _compile(node: dict[str, Any]) -> _Closure | None:
    kind = node.get("type")
    if kind == "current":
        return _current
    if kind == "field":
        return _field(node["value"])
    if kind == "subexpression":
        parts = [_compile(child) for child in node["children"]]
        return None if _any_none(parts) else _chain(parts)  # type: ignore[arg-type]
    if kind == "function_expression":
        arguments = [_compile(child) for child in node["children"]]
        if _any_none(arguments):
            return None
        return _call(node["value"], arguments)  # type: ignore[arg-type]
    return None


def _any_none(closures: list[_Closure | None]) -> bool:
    return any(closure is None for closure in closures)


def _current(value: Any, _: functions.Functions) -> Any:
    return value


def _field(name: str) -> _Closure:
    def field(value: Any, _: functions.Functions) -> Any:
        try:
            return value.get(name)
        except AttributeError:  # not an object: JMESPath answers null
            return None

    return field


def _chain(parts: list[_Closure]) -> _Closure:
    first, rest = parts[0], parts[1:]

    def chain(value: Any, fns: functions.Functions) -> Any:
        result = first(value, fns)
        for part in rest:
            if result is None:  # JMESPath stops a sub-expression at the first null
                return None
            result = part(result, fns)
        return result

    return chain


def _call(name: str, arguments: list[_Closure]) -> _Closure:
    if len(arguments) == 1:  # powertools_json(body) and the like: no comprehension per call
        (only,) = arguments
        builtin = BUILTINS.get(name)

        def call_one(value: Any, fns: functions.Functions) -> Any:
            argument = only(value, fns)
            # The built-ins alone (no custom functions) on a string: exactly what JMESPath's
            # checks would let through, so they are skipped.
            if builtin is not None and type(fns) is BuiltinFunctions and type(argument) is str:
                return builtin(fns, argument)
            return fns.call_function(name, [argument])

        return call_one

    def call(value: Any, fns: functions.Functions) -> Any:
        return fns.call_function(name, [argument(value, fns) for argument in arguments])

    return call
