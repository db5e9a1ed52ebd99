"""JMESPath expressions on an HTTP event, with its body decoded and parsed once.

``event_key_jmespath`` and ``payload_validation_jmespath`` are evaluated on a shallow copy of the
event whose ``body`` is the parsed JSON body (base64-decoded first when ``isBase64Encoded``), so
``body.order_id`` works. Expressions written for Powertools keep working too:
``powertools_json(body)`` and ``powertools_base64(body)`` hand the already parsed body straight
back instead of decoding it again. A body that is not JSON (or not UTF-8) is left as the event
carried it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import jmespath
from jmespath import functions

from idempotent_lambda._jmespath_functions import BuiltinFunctions
from idempotent_lambda.config import IdempotencyConfig

_NOT_PARSED: Any = object()
_body_aware_classes: dict[type[BuiltinFunctions], type[BuiltinFunctions]] = {}


class ExpressionError(Exception):
    """An expression could not be evaluated on this request; the reason holds no user data."""


class EventView:
    """Evaluate the config's expressions on one event; the body is parsed at most once."""

    def __init__(self, config: IdempotencyConfig, event: Mapping[str, Any], body: str | bytes):
        self._config = config
        self._event = event
        self._body = body
        self._view: dict[str, Any] | None = None
        self._options: jmespath.Options | None = None

    def search(self, expression: Any, name: str) -> Any:
        """Return ``expression`` evaluated on the event view.

        Raises:
            ExpressionError: The expression (or a built-in it calls) failed on this request.
        """
        view, options = self._prepare()
        try:
            return expression.search(view, options=options)
        except Exception as exc:  # JMESPath errors, and bad JSON/base64/gzip met by built-ins
            raise ExpressionError(f"{name} could not be evaluated: {type(exc).__name__}") from exc

    def _prepare(self) -> tuple[dict[str, Any], jmespath.Options]:
        if self._view is not None and self._options is not None:
            return self._view, self._options
        parsed = _parse(self._body)
        view = dict(self._event)
        if parsed is not _NOT_PARSED:
            view["body"] = parsed
        instance = self._config._make_functions()
        instance.__class__ = _body_aware(type(instance))
        instance._http_parsed_body = parsed  # type: ignore[attr-defined]
        instance._http_raw_body = self._event.get("body")  # type: ignore[attr-defined]
        self._view, self._options = view, jmespath.Options(custom_functions=instance)
        return self._view, self._options


def _parse(body: str | bytes) -> Any:
    try:
        text = body.decode("utf-8") if isinstance(body, bytes) else body
        return json.loads(text)
    except (ValueError, RecursionError):  # not UTF-8 / not JSON / nested beyond the parser
        return _NOT_PARSED


@functions.signature({"types": []})
def _powertools_json(self: Any, value: Any) -> Any:
    if value is self._http_parsed_body:
        return value
    if value is self._http_raw_body and self._http_parsed_body is _NOT_PARSED:
        raise ValueError("the body is not JSON")  # already tried: do not parse it twice
    if not isinstance(value, str):
        raise TypeError("powertools_json() expects a string")
    return BuiltinFunctions._func_powertools_json(self, value)


@functions.signature({"types": []})
def _powertools_base64(self: Any, value: Any) -> Any:
    if value is self._http_parsed_body:
        return value  # the adapter decoded (and parsed) the body already
    if not isinstance(value, str):
        raise TypeError("powertools_base64() expects a string")
    return BuiltinFunctions._func_powertools_base64(self, value)


_OVERRIDES: dict[str, Callable[..., Any]] = {
    "_func_powertools_json": _powertools_json,
    "_func_powertools_base64": _powertools_base64,
}


def _body_aware(cls: type[BuiltinFunctions]) -> type[BuiltinFunctions]:
    """Return a subclass of ``cls`` whose built-ins accept the parsed body (user's win)."""
    aware = _body_aware_classes.get(cls)
    if aware is None:
        attributes = {
            name: override
            for name, override in _OVERRIDES.items()
            if getattr(cls, name, None) is getattr(BuiltinFunctions, name)
        }
        aware = type(f"BodyAware{cls.__name__}", (cls,), attributes)
        _body_aware_classes[cls] = aware
    return aware
