"""Bodies parsed by ``powertools_json`` hash exactly as the canonical encoder says they must."""

from __future__ import annotations

import json
from typing import Any

import jmespath
from hypothesis import given, settings
from hypothesis import strategies as st

from idempotent_lambda._canonical import canonical_bytes, canonical_json
from idempotent_lambda._identity import derive_invocation
from idempotent_lambda._jmespath_functions import BuiltinFunctions
from idempotent_lambda._lambda_context import LambdaContextLike
from idempotent_lambda.config import IdempotencyConfig

json_data = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=15,
)


def parse(text: str) -> tuple[Any, Any]:
    """Parse like ``powertools_json`` and return (parsed, canonical_root)."""
    functions = BuiltinFunctions()
    functions.track_floats = True
    parsed = jmespath.search(
        "powertools_json(@)", text, jmespath.Options(custom_functions=functions)
    )
    return parsed, functions.canonical_root


@given(data=json_data)
@settings(max_examples=300, deadline=None)
def test_parsed_root_marked_canonical_only_when_its_encoding_is(data: Any) -> None:
    """When a parsed body is marked canonical, its direct encoding equals the exact one."""
    parsed, root = parse(json.dumps(data))
    if root is not None:
        assert canonical_json(parsed).encode() == canonical_bytes(root, prepared=True)


def test_exponent_floats_are_not_marked() -> None:
    """1e-7 and 1e20 need normalising, so such bodies take the normalising pass."""
    assert parse('{"a": 1e-7}')[1] is None
    assert parse('{"a": 1.5e20}')[1] is None
    assert parse('{"a": 4.5, "b": [1, "x"]}')[1] is not None


def test_integral_floats_parse_as_equal_ints() -> None:
    """4.0 and -0.0 parse as 4 and 0, which the C encoder spells canonically."""
    parsed, root = parse('{"a": 4.0, "b": -0.0, "c": [2.50]}')
    assert root is not None
    assert {"a": 4, "b": 0, "c": [2.5]} == parsed
    assert '{"a":4,"b":0,"c":[2.5]}' == canonical_bytes(root, prepared=True).decode()


def test_validation_hash_is_the_same_either_way() -> None:
    """A body with and without the fast path yields the same validation hash."""
    config = IdempotencyConfig(
        event_key_jmespath="powertools_json(body).id",
        payload_validation_jmespath="powertools_json(body)",
    )
    context: LambdaContextLike | None = None
    fast = derive_invocation(
        config, {"body": '{"id": 1, "p": 2.5}'}, prefix="p", now_ms=0, context=context
    )
    slow = derive_invocation(
        config, {"body": '{"p": 2.50, "id": 1.0}'}, prefix="p", now_ms=0, context=context
    )
    assert fast is not None
    assert slow is not None
    assert (fast.key, fast.payload_hash) == (slow.key, slow.payload_hash)
