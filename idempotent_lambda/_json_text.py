"""JSON text in and out through the C scanner and encoder directly, minus per-call overhead.

``json.loads`` runs two whitespace regexes and some Python around the C scanner, which is about
as much time as the scan itself for a small document. `JsonParser.parse` calls the scanner and
only falls back to the decoder (and its exact behaviour and error messages) when the text does
not consist of exactly one value with nothing around it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json.scanner import make_scanner
from typing import Any

_encode_basestring = json.encoder.encode_basestring


class JsonParser:
    """`json.JSONDecoder.decode`, faster for text that is one value with no surrounding space.

    Args:
        decoder: The decoder whose hooks (``object_hook``, ``parse_float``...) apply.
    """

    __slots__ = ("_decode", "_scan")

    def __init__(self, decoder: json.JSONDecoder | None = None) -> None:
        chosen = decoder if decoder is not None else json.JSONDecoder()
        self._decode = chosen.decode
        self._scan = make_scanner(chosen)  # type: ignore[arg-type]  # typeshed: the C scanner takes a decoder

    def parse(self, text: str) -> Any:
        """Return the value of ``text``; raises `json.JSONDecodeError` as the decoder does."""
        try:
            value, end = self._scan(text, 0)
        except StopIteration:  # leading space, or no value: the decoder says which
            return self._decode(text)
        if end != len(text):  # trailing space is fine, anything else is an error: decoder again
            return self._decode(text)
        return value


PLAIN = JsonParser()
"""A parser with no hooks: what ``json.loads(text)`` gives."""


_PROBE = {"b": [1, 2.5, -0.25, True, None, 'é\u2028"\\'], "a": {"z": "", "y": 10**20}}


def text_writer(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """Return a function equal to ``encoder.encode``, minus its per-call set-up.

    ``JSONEncoder.encode`` builds a new C encoder object on every call. For an encoder without
    indentation or circular-reference checks (whose bookkeeping is per call) the C encoder can be
    built once and called directly. It is first checked against the encoder's pure-Python
    implementation on a probe value that exercises every option; anything unexpected falls back
    to ``encoder.encode``.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None or encoder.indent is not None or encoder.check_circular:
        return encoder.encode
    escape = json.encoder.encode_basestring_ascii if encoder.ensure_ascii else _encode_basestring
    try:
        c_encoder = make(
            None,
            encoder.default,
            escape,
            None,
            encoder.key_separator,
            encoder.item_separator,
            encoder.sort_keys,
            encoder.skipkeys,
            encoder.allow_nan,
        )

        def write(value: Any) -> str:
            return "".join(c_encoder(value, 0))

        if write(_PROBE) != "".join(encoder.iterencode(_PROBE)):  # the pure-Python encoder
            return encoder.encode
    except Exception:  # a C encoder with another signature: keep the public path
        return encoder.encode
    return write
