"""A mkdocs hook: code that wraps keeps its shape at 1280 px (docs/stylesheets/fit.css).

- **Code blocks.** They wrap instead of running off the page. A wrapped line would start its
  continuation at the block's left edge, where it reads as a line of its own at the wrong
  depth. pymdownx.highlight puts each line in a span (``line_spans`` in mkdocs.yml); this hook
  gives each span its indentation, in characters, as ``--indent``, and fit.css hangs the
  continuation two characters deeper than the line's first character.
- **Code in tables.** Material lets inline code break anywhere, so a narrow cell cut
  ``IdempotencyValidationError`` into ``IdempotencyValidatio`` and ``nError``. fit.css stops
  that; this hook lets a cell break code only between the words of a long name (after
  ``_ . / ( , =``, or before a capital that ends a lower-case run), never inside a word.
"""

from __future__ import annotations

import html
import re
from typing import Any

#: A line of a code block, up to the next line or the end of the block.
LINE = re.compile(r'<span id="(__span-[\d-]+)">(.*?)(?=<span id="__span-|</code>)', re.DOTALL)
TAG = re.compile(r"<[^>]+>")
TABLE = re.compile(r"<table\b.*?</table>", re.DOTALL)
INLINE_CODE = re.compile(r"<code>([^<]*)</code>")
#: Where a name in a table may break: after ``_ . / ( , =``, or where a lower-case letter meets
#: an upper-case one (``Idempotency|Already|In|Progress|Error``).
BREAK_AT = re.compile(r"(?<=[_./(,=])(?=[^_./(,=])|(?<=[a-z0-9])(?=[A-Z])")


def indentation(line_html: str) -> int:
    """Return how many spaces begin the text of a line's HTML."""
    text = html.unescape(TAG.sub("", line_html))
    return len(text) - len(text.lstrip(" "))


def _indent(match: re.Match[str]) -> str:
    depth = indentation(match.group(2))
    if not depth:
        return match.group(0)
    return f'<span id="{match.group(1)}" style="--indent: {depth}">{match.group(2)}'


def _breakable(match: re.Match[str]) -> str:
    return "<code>" + BREAK_AT.sub("<wbr>", match.group(1)) + "</code>"


def on_post_page(output: str, page: Any, config: Any) -> str:
    """Mark each indented code line; let code in tables break between words only."""
    output = LINE.sub(_indent, output)
    return TABLE.sub(lambda table: INLINE_CODE.sub(_breakable, table.group(0)), output)
