"""Parse JSON text with the C scanner directly: `json.loads` minus its per-call overhead.

``json.loads`` runs two whitespace regexes and some Python around the C scanner, which is about
as much time as the scan itself for a small document. `JsonParser.parse` calls the scanner and
only falls back to the decoder (and its exact behaviour and error messages) when the text does
not consist of exactly one value with nothing around it.
"""

from __future__ import annotations

import json
from json.scanner import make_scanner
from typing import Any


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
