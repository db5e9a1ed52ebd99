"""The direct JSON scanner and writer behave exactly like `json` itself, including failures."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idempotent_lambda import _json_text
from idempotent_lambda._json_text import PLAIN, JsonParser, text_writer

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)
layouts = st.sampled_from(
    [
        {"separators": (",", ":")},
        {"indent": 2},
        {"ensure_ascii": False},
        {"sort_keys": True},
    ]
)
padding = st.sampled_from(["", " ", "\n", " \t\r\n"])


def _outcome(parse: Any, text: str) -> tuple[str, Any]:
    try:
        return ("value", parse(text))
    except json.JSONDecodeError as exc:
        return ("error", (exc.msg, exc.pos))


@settings(max_examples=300)
@given(value=json_values, layout=layouts, before=padding, after=padding)
def test_parse_equals_json_loads(
    value: Any, layout: dict[str, Any], before: str, after: str
) -> None:
    """Any JSON text, laid out any way and padded with whitespace, parses as json.loads does."""
    text = before + json.dumps(value, **layout) + after
    assert json.loads(text) == PLAIN.parse(text)


@pytest.mark.parametrize(
    "text",
    ["", " ", "{", '{"a":1', "1 2", '{"a":1}x', "[1,]", "\ufeff{}", "nul", '"\\x"', "NaNx"],
)
def test_bad_text_fails_as_json_loads_fails(text: str) -> None:
    """Broken text raises JSONDecodeError with json's own message and position."""
    assert _outcome(json.loads, text)[0] == "error"
    assert _outcome(json.JSONDecoder().decode, text) == _outcome(PLAIN.parse, text)


def test_hooks_of_the_decoder_apply() -> None:
    """A parser built on a decoder with hooks runs them, as the decoder would."""
    seen: list[str] = []

    def parse_float(text: str) -> str:
        seen.append(text)
        return f"float:{text}"

    parser = JsonParser(json.JSONDecoder(parse_float=parse_float, object_hook=len))
    assert [2, "float:1.5"] == parser.parse('[{"a":1,"b":2},1.5]')
    assert ["1.5"] == seen


@settings(max_examples=300)
@given(value=json_values, sort_keys=st.booleans(), ensure_ascii=st.booleans())
def test_writer_equals_encoder(value: Any, sort_keys: bool, ensure_ascii: bool) -> None:
    """The writer's text is the encoder's text, for every option it takes over."""
    encoder = json.JSONEncoder(
        sort_keys=sort_keys,
        ensure_ascii=ensure_ascii,
        check_circular=False,
        separators=(",", ":"),
    )
    write = text_writer(encoder)
    assert write != encoder.encode  # the direct path is the one under test
    assert encoder.encode(value) == write(value)


def test_writer_raises_what_the_encoder_raises() -> None:
    """Unencodable values fail the same way: default's error, NaN refused."""

    def refuse(value: Any) -> Any:
        raise LookupError(type(value).__name__)

    encoder = json.JSONEncoder(check_circular=False, allow_nan=False, default=refuse)
    write = text_writer(encoder)
    with pytest.raises(LookupError, match="set"):
        write({"a": {1}})
    with pytest.raises(ValueError, match="Out of range float"):
        write([float("nan")])


@pytest.mark.parametrize(
    "encoder",
    [
        json.JSONEncoder(),  # checks for cycles: per-call bookkeeping
        json.JSONEncoder(check_circular=False, indent=2),
    ],
)
def test_writer_keeps_encode_when_it_cannot_take_over(encoder: json.JSONEncoder) -> None:
    """Encoders whose options need per-call state keep their own encode."""
    assert encoder.encode == text_writer(encoder)


def test_writer_falls_back_without_a_usable_c_encoder(monkeypatch: pytest.MonkeyPatch) -> None:
    """No C encoder, one with another signature, or one that writes differently: encode it is."""
    encoder = json.JSONEncoder(check_circular=False)
    monkeypatch.setattr(json.encoder, "c_make_encoder", None)
    assert encoder.encode == text_writer(encoder)

    def other_signature(*args: Any) -> Any:
        raise TypeError("takes 10 arguments")

    monkeypatch.setattr(json.encoder, "c_make_encoder", other_signature)
    assert encoder.encode == text_writer(encoder)

    monkeypatch.setattr(json.encoder, "c_make_encoder", lambda *args: lambda value, level: ["x"])
    assert encoder.encode == text_writer(encoder)
    assert "(" not in repr(_json_text._PROBE)  # plain data: every encoder accepts the probe
