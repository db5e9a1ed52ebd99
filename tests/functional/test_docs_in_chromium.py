"""Code blocks, signatures and tables at 1280 px, measured in headless Chromium on the built site.

Code fits its column; a wrapped code line keeps its indentation; a name in a table cell is not
cut inside a word (scripts/mkdocs_code_layout.py and docs/stylesheets/fit.css).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    "getting-started",
    *(f"reference/{p.stem}" for p in (ROOT / "docs/reference").glob("*.md")),
]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: Appended to a copy of each page: lists every code block wider than its box.
PROBE = """<script>window.addEventListener("load", () => {
  const wide = [];
  document.querySelectorAll("pre > code, .doc-signature").forEach((e) => {
    if (e.scrollWidth > e.clientWidth + 1) wide.push(e.textContent.slice(0, 60));
  });
  const report = document.createElement("div");
  report.id = "overflow-report";
  report.textContent = JSON.stringify(wide);
  document.body.appendChild(report);
});</script>"""

#: Pages with wrapped code lines and tables of long names (concepts: error names; cdk: 46
#: wrapped lines; sqs: a line whose first word is longer than the column).
LAYOUT_PAGES = ["concepts", "production", "sample-app", "sqs", "cdk"]
LAYOUT_PROBE = (Path(__file__).parent / "layout_probe.js").read_text(encoding="utf-8")


@pytest.fixture(autouse=True)
def _chromium() -> None:
    """Fail, never skip, without Chromium: `make test` requires it (.ci/run installs it)."""
    assert CHROMIUM is not None, "chromium is not installed (apt-get install chromium)"


@pytest.mark.parametrize("page", PAGES)
def test_code_fits_at_1280_px(docs_site: Path, page: str) -> None:
    """No code block or signature is wider than the content column in a 1280 px window."""
    site = docs_site
    html = (site / page / "index.html").read_text(encoding="utf-8")
    probe = site / page / "_probe.html"
    probe.write_text(html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    assert CHROMIUM is not None
    dom = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1280,900",
            "--virtual-time-budget=3000",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    report = re.search(r'<div id="overflow-report">([^<]*)</div>', dom)
    assert report is not None, "the probe did not run"
    assert [] == json.loads(
        report.group(1).replace("&gt;", ">").replace("&lt;", "<").replace("&amp;", "&")
    )


@pytest.mark.parametrize("page", LAYOUT_PAGES)
def test_wrapped_code_keeps_its_indentation_and_names_in_tables_stay_whole(
    docs_site: Path, page: str
) -> None:
    """At 1280 px a wrapped code line hangs under its own indentation, and table cells break
    names only between words, without growing wider than the column."""
    html = (docs_site / page / "index.html").read_text(encoding="utf-8")
    probe = docs_site / page / "_layout_probe.html"
    script = f"<script>{LAYOUT_PROBE}</script>"
    probe.write_text(html.replace("</body>", script + "</body>"), encoding="utf-8")
    assert CHROMIUM is not None
    dom = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1280,900",
            "--virtual-time-budget=3000",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    report = re.search(r'<div id="layout-report">([^<]*)</div>', dom)
    assert report is not None, "the probe did not run"
    found = json.loads(
        report.group(1).replace("&gt;", ">").replace("&lt;", "<").replace("&amp;", "&")
    )
    assert {"unindented": [], "broken": [], "wide": []} == {
        key: found[key] for key in ("unindented", "broken", "wide")
    }
    if page != "concepts":  # its code blocks fit without wrapping
        assert found["wrapped"] > 0, "no wrapped code line was measured"
