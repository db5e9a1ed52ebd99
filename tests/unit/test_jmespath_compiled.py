"""The compiled fast path of JMESPath expressions agrees with JMESPath itself."""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

import jmespath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idempotent_lambda._jmespath_compiled import CompiledExpression
from idempotent_lambda._jmespath_functions import BuiltinFunctions

EXPRESSIONS = [
    "order_id",
    "a.b.c",
    "@",
    "powertools_json(body).order_id",
    "powertools_json(body)",
    "powertools_json(body).items",
    "powertools_base64(data)",
    "powertools_json(powertools_base64_gzip(data)).id",
    "requestContext.authorizer.claims.sub",
    "a[0]",  # not compiled: evaluated by JMESPath
    "[a, b]",
    "length(items)",
    "merge(a, b)",  # two arguments, both compiled
    "not_null(a, b.c)",
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=10,
)


def evaluate(expression: str, value: Any, compiled: bool) -> tuple[str, Any]:
    """Return ("ok", result) or ("error", exception class name)."""
    options = jmespath.Options(custom_functions=BuiltinFunctions())
    try:
        if compiled:
            return "ok", CompiledExpression(expression).search(value, options)
        return "ok", jmespath.compile(expression).search(value, options=options)
    except Exception as exc:
        return "error", type(exc).__name__


@pytest.mark.parametrize("expression", EXPRESSIONS)
@given(value=json_values)
@settings(max_examples=60, deadline=None)
def test_fast_path_matches_jmespath_on_arbitrary_values(expression: str, value: Any) -> None:
    """On any JSON value, the compiled expression returns or raises what JMESPath does."""
    assert evaluate(expression, value, False) == evaluate(expression, value, True)


def test_fast_path_matches_on_realistic_event() -> None:
    """Key and validation expressions over a realistic event agree, built-ins included."""
    body = json.dumps({"order_id": 7, "items": [{"sku": "a"}]})
    packed = base64.b64encode(gzip.compress(json.dumps({"id": "g"}).encode())).decode()
    event = {
        "body": body,
        "data": packed,
        "requestContext": {"authorizer": {"claims": {"sub": "u-1"}}},
    }
    for expression in EXPRESSIONS:
        assert evaluate(expression, event, False) == evaluate(expression, event, True)


def test_fast_path_is_taken_for_key_shapes() -> None:
    """Field paths and function calls compile; other shapes fall back to JMESPath."""
    assert CompiledExpression("powertools_json(body).order_id")._fast is not None
    assert CompiledExpression("a[0]")._fast is None
