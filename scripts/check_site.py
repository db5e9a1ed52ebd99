"""Find what renders broken in a built docs site: reStructuredText remnants, paths as plain text.

Usage: `python scripts/check_site.py SITE_DIR` after `mkdocs build --site-dir SITE_DIR`.

mkdocstrings renders docstrings as Markdown, and `mkdocs build --strict` accepts
reStructuredText without a word; it shows up on the page as runs of `=====` (a table's rules),
doubled backticks, a paragraph ending in `::` (a literal block's marker), or a role such as
`:class:` before a name. A path like "see docs/http.md" written as text instead of a link is a
dead end on the site. Each HTML file's visible text is read block by block (paragraphs, list
items, table cells, headings), code and preformatted text left out (and links, for paths).

Prints `file:line: what: snippet` for each finding and exits 1; prints a summary and exits 0
when there is none. `make docs-check` (part of `make test`) runs it.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

#: Elements whose text is one block: a finding's snippet never spans two.
BLOCKS = frozenset(
    {"p", "li", "td", "th", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "div"}
)
#: Elements whose text is code, never prose.
CODE = frozenset({"code", "pre", "kbd", "samp"})
SKIPPED = frozenset({"script", "style", "template", "svg"})
VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
)
#: Stands in for a code span in a block's prose, so ":class:" before one still reads as a role.
CODE_MARK = "\x00"

#: `(what, pattern)` searched in a block's prose (code left out).
PROSE_PATTERNS = (
    ("reStructuredText rule", re.compile(r"={4,}")),
    ("reStructuredText literal", re.compile(r"``")),
    (
        "reStructuredText role",
        re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|exc|data|obj|const|ref|doc|term):"),
    ),
    ("reStructuredText literal marker", re.compile(r"\S::\s*$")),
)
#: A docs path in text that is not a link.
PATH_PATTERN = re.compile(r"\bdocs/[\w./-]+\.md\b")


@dataclass(frozen=True, slots=True)
class Finding:
    """One remnant: where it is, what it is, and the text around it."""

    path: str
    line: int
    what: str
    snippet: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}: {self.snippet}"


@dataclass
class _Block:
    line: int
    prose: list[str] = field(default_factory=list)  # code spans as CODE_MARK
    plain: list[str] = field(default_factory=list)  # prose outside links too


class _Reader(HTMLParser):
    """Collect each block's prose, with the line it starts on."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[_Block] = []
        self._open: list[str] = []
        self._block = _Block(1)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in BLOCKS:
            self._flush()
        if tag not in VOID:
            self._open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self._open:
            while self._open and self._open.pop() != tag:
                pass
        if tag in BLOCKS:
            self._flush()

    def handle_data(self, data: str) -> None:
        if SKIPPED & set(self._open):
            return
        if CODE & set(self._open):
            if not self._block.prose or self._block.prose[-1] != CODE_MARK:
                self._block.prose.append(CODE_MARK)
            return
        self._block.prose.append(data)
        if "a" not in self._open:
            self._block.plain.append(data)

    def close(self) -> None:
        super().close()
        self._flush()

    def _flush(self) -> None:
        if "".join(self._block.prose).strip(f" \n\t{CODE_MARK}"):
            self.blocks.append(self._block)
        self._block = _Block(self.getpos()[0])


def _snippet(text: str, start: int, end: int) -> str:
    shown = text[max(0, start - 40) : end + 40].replace(CODE_MARK, "`…`")
    return " ".join(shown.split())


def check_html(html: str, path: str) -> list[Finding]:
    """Return the findings of one page."""
    reader = _Reader()
    reader.feed(html)
    reader.close()
    findings = []
    for block in reader.blocks:
        prose = "".join(block.prose)
        for what, pattern in PROSE_PATTERNS:
            match = pattern.search(prose)  # one finding per kind and block: a table has many
            if match:
                findings.append(Finding(path, block.line, what, _snippet(prose, *match.span())))
        plain = "".join(block.plain)
        for match in PATH_PATTERN.finditer(plain):
            snippet = _snippet(plain, *match.span())
            findings.append(Finding(path, block.line, "docs path as plain text", snippet))
    return findings


def check_site(site: Path) -> tuple[int, list[Finding]]:
    """Return how many pages `site` has, and the findings of all of them."""
    pages = sorted(site.rglob("*.html"))
    findings = [
        finding
        for page in pages
        for finding in check_html(
            page.read_text(encoding="utf-8"), page.relative_to(site).as_posix()
        )
    ]
    return len(pages), findings


def main(argv: list[str] | None = None) -> int:
    """Check the site folder given on the command line."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        print(__doc__, file=sys.stderr)
        return 2
    pages, findings = check_site(Path(args[0]))
    for finding in findings:
        print(finding)
    if findings:
        print(f"{len(findings)} findings in {pages} pages")
        return 1
    print(f"site: {pages} pages, no reStructuredText remnants or plain-text docs paths")
    return 0


if __name__ == "__main__":
    sys.exit(main())
