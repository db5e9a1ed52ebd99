"""Safe terminal output and confirmations for the operator CLI.

Stored keys and results come from requests: a value holding an escape sequence could rewrite the
operator's terminal, and bidi controls (U+202A-U+202E, U+2066-U+2069) can make a key read as
another. `escape_text` makes them visible instead.
"""

from __future__ import annotations

import re
import sys

_UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def escape_text(text: str) -> str:
    """Return ``text`` with C0 (but newline), DEL, C1 and bidi controls written as escapes."""
    return _UNSAFE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def confirm(question: str) -> bool:
    """Ask ``question`` on the terminal; False (without asking) when stdin is not a terminal."""
    if not sys.stdin.isatty():
        return False
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")
