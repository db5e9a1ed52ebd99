"""Properties of the canonical JSON: the fast path agrees with the exact encoder, always."""

from __future__ import annotations

import decimal
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from idempotent_lambda import IdempotencyKeyError
from idempotent_lambda._canonical import _exact, canonical_json

# Strings that look like the number spellings the fast path must catch, with JSON delimiters.
number_like_text = st.from_regex(
    r"[:,\[{\"]?-?\d{1,3}(\.\d{1,3})?(e[+-]?\d{1,2})?[,\]}:\"]?", fullmatch=True
)
finite_floats = st.floats(allow_nan=False, allow_infinity=False)
finite_decimals = st.decimals(allow_nan=False, allow_infinity=False)
hashable_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | finite_floats
    | finite_decimals
    | st.text(max_size=8)
    | number_like_text
)
scalars = hashable_scalars | st.binary(max_size=8)
object_keys = (
    st.text(max_size=6)
    | number_like_text
    | st.sampled_from(["true", "false", "null", "1", "1.0", "10", "9", "-0"])
    | st.integers(-20, 20)
    | finite_floats
    | st.booleans()
    | st.none()
)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return (
        st.lists(children, max_size=5)
        | st.tuples(children, children)
        | st.dictionaries(object_keys, children, max_size=5)
        | st.frozensets(hashable_scalars, max_size=5)
    )


json_like = st.recursive(scalars, _containers, max_leaves=25)


def _outcome(encode: Any, value: Any) -> tuple[str, str]:
    try:
        return ("json", encode(value))
    except IdempotencyKeyError:
        return ("key-error", "")


@settings(max_examples=400, deadline=None)
@given(json_like)
def test_fast_path_agrees_with_the_exact_encoder(value: Any) -> None:
    """For any JSON-like value both encoders give the same text, or both refuse it."""
    assert _outcome(_exact, value) == _outcome(canonical_json, value)


@settings(max_examples=200, deadline=None)
@given(json_like)
def test_canonical_json_is_a_fixed_point(value: Any) -> None:
    """Re-encoding the parsed canonical text (numbers as Decimal) gives the same text."""
    kind, text = _outcome(canonical_json, value)
    if kind == "json":
        parsed = json.loads(text, parse_float=decimal.Decimal)
        assert text == canonical_json(parsed)


@given(st.integers(-(2**53), 2**53))
def test_integral_numbers_hash_alike_in_every_type(number: int) -> None:
    """``n``, ``float(n)`` and ``Decimal(n)`` (with trailing zeros) are one canonical number."""
    expected = canonical_json(number)

    actual = {
        canonical_json(float(number)),
        canonical_json(decimal.Decimal(number).quantize(decimal.Decimal("0.01"))),
        canonical_json([float(number)])[1:-1],
        canonical_json({"n": float(number)})[5:-1],
    }
    assert {expected} == actual


@given(finite_floats)
def test_floats_encode_as_their_shortest_decimal(number: float) -> None:
    """A float encodes as the normalised decimal of its shortest repr, never with an exponent."""
    expected = canonical_json(decimal.Decimal(repr(number)))

    assert expected == canonical_json(number)
    assert "e" not in expected.lower()


@given(st.text())
def test_strings_are_never_numbers(text: str) -> None:
    """A string encodes as a JSON string, so ``"1"`` never collides with ``1``."""
    assert text == json.loads(canonical_json(text))
