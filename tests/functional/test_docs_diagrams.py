"""The docs' diagrams draw offline in headless Chromium (scripts/check_diagrams.py).

Never skipped: without Chromium, or without the mermaid that `make mermaid` installs, these
tests fail, in CI too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from mkdocs.exceptions import PluginError

from scripts import mkdocs_mermaid
from scripts.check_diagrams import check_page as check_diagram_page
from scripts.check_diagrams import check_site as check_diagrams
from scripts.check_diagrams import chromium, diagram_pages, serving

#: Where a reader needs a picture (issue 43): the lifecycle on the home page and in Concepts,
#: the request sequences in Concepts, the batch pipeline, the outbox, the durable claim; and the
#: import graphs in Architecture and the sample's page (issue 42).
EXPECTED = {
    "": 1,
    "concepts": 4,
    "batches": 1,
    "outbox": 1,
    "durable": 1,
    "architecture": 1,
    "sample-app": 1,
}


def test_every_diagram_draws_offline(docs_site: Path) -> None:
    """Each page's diagrams are SVGs with their labels, drawn with no request off 127.0.0.1."""
    pages, findings = check_diagrams(docs_site)
    assert [] == [str(finding) for finding in findings]
    assert EXPECTED == {page: len(sources) for page, sources in pages.items()}


def broken_copy(site: Path, tmp_path: Path, page: str) -> Path:
    """Copy what ``page`` needs of the site into ``tmp_path``."""
    copy = tmp_path / "site"
    for part in ("assets", "javascripts", page):
        shutil.copytree(site / part, copy / part)
    return copy


def check_one(site: Path, page: str) -> list[str]:
    """Check ``page`` of ``site`` alone."""
    browser = chromium()
    assert browser is not None, "chromium is not installed (apt-get install chromium)"
    with serving(site) as base:
        return check_diagram_page(browser, site, base, page, diagram_pages(site)[page])


def test_a_diagram_with_a_syntax_error_fails_the_check(docs_site: Path, tmp_path: Path) -> None:
    """A diagram mermaid cannot parse is reported, not passed as drawn."""
    copy = broken_copy(docs_site, tmp_path, "concepts")
    page = copy / "concepts/index.html"
    html = page.read_text(encoding="utf-8")
    assert "stateDiagram-v2\n" in html
    page.write_text(html.replace("stateDiagram-v2\n", "stateDiagram-v2\n    A -->> --> B\n", 1))
    problems = check_one(copy, "concepts")
    assert "3 of 4 diagrams drawn as SVG" in problems
    assert "a diagram was drawn as a syntax error" in problems


def test_a_page_that_reaches_for_a_cdn_fails_the_check(docs_site: Path, tmp_path: Path) -> None:
    """Without the site's own mermaid, Material asks a CDN: blocked, and reported."""
    copy = broken_copy(docs_site, tmp_path, "durable")
    page = copy / "durable/index.html"
    html = page.read_text(encoding="utf-8")
    tag = '<script src="../javascripts/mermaid.min.js"></script>'
    assert tag in html
    page.write_text(html.replace(tag, ""), encoding="utf-8")
    problems = check_one(copy, "durable")
    assert "the local mermaid script did not load" in problems
    assert "0 of 1 diagrams drawn as SVG" in problems
    assert any(p.startswith("requests off 127.0.0.1") and "mermaid" in p for p in problems)


def test_the_build_stops_without_mermaid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No npm package, no site: the hook refuses to build one whose diagrams cannot draw."""
    monkeypatch.setattr(mkdocs_mermaid, "SCRIPT", tmp_path / "mermaid.min.js")
    with pytest.raises(PluginError, match="make mermaid"):
        mkdocs_mermaid.on_config({})
