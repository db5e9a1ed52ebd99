"""scripts/check_site.py on small pages: what renders broken is found, good pages pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.check_site import check_html, main

GOOD = """<html><head><style>p::before { content: "===="; }</style>
<script>const rule = "======"; const path = "docs/http.md";</script></head><body>
<h1>HTTP APIs</h1>
<p>The <code>idempotent_http</code> adapter answers 409;
see <a href="../http/">docs/http.md</a>.</p>
<table><tr><th>status</th><th>when</th></tr><tr><td>409</td><td>in progress</td></tr></table>
<pre><code>a[::2]
=====
value = ``quoted``
:class:`Foo`
docs/http.md</code></pre>
<p>Resources such as <code>AWS::DynamoDB::Table</code> are fine, and so is a ratio 2:1.</p>
</body></html>"""


@pytest.mark.parametrize(
    ("html", "what"),
    [
        ("<p>====== ====== status when ====== ======</p>", "reStructuredText rule"),
        ("<p>Use ``idempotent`` here.</p>", "reStructuredText literal"),
        ("<p>Raises :class:<code>IdempotencyKeyError</code>.</p>", "reStructuredText role"),
        ("<li>See :py:func:<code>idempotent</code></li>", "reStructuredText role"),
        ("<p>is the Lambda handler for the whole batch::</p>", "reStructuredText literal marker"),
        ("<td>See docs/http.md for the caller.</td>", "docs path as plain text"),
    ],
)
def test_a_remnant_is_found_with_its_page_and_snippet(html: str, what: str) -> None:
    """Each kind of remnant is reported once, naming the page and quoting the text."""
    (finding,) = check_html(f"<html><body>{html}</body></html>", "reference/x/index.html")
    assert (what, "reference/x/index.html") == (finding.what, finding.path)
    assert finding.snippet
    assert finding.line >= 1


def test_a_good_page_has_no_finding() -> None:
    """Code, preformatted text, links, scripts and styles are never read as prose."""
    assert [] == check_html(GOOD, "http/index.html")


def test_the_script_exits_1_and_prints_each_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A site with one bad page fails, printing file and snippet; a good site passes."""
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "index.html").write_text(GOOD, encoding="utf-8")
    assert 0 == main([str(tmp_path)])
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "index.html").write_text(
        "<p>See docs/shared-tables.md.</p><p>========  =====</p>", encoding="utf-8"
    )

    assert 1 == main([str(tmp_path)])

    out = capsys.readouterr().out
    assert "bad/index.html:1: docs path as plain text: See docs/shared-tables.md." in out
    assert "bad/index.html:1: reStructuredText rule: ========" in out
    assert "2 findings in 2 pages" in out


def test_make_docs_check_runs_the_site_check() -> None:
    """docs-check (part of `make test`) reads the built site with the script, always."""
    import subprocess

    dry_run = subprocess.run(
        ["make", "-n", "docs-check"], capture_output=True, text=True, check=True
    ).stdout
    assert "scripts/check_site.py" in dry_run
