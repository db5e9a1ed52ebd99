"""Check that every diagram of a built docs site draws, offline, in headless Chromium.

Usage: `python scripts/check_diagrams.py SITE_DIR` after `mkdocs build --site-dir SITE_DIR`.

The site is served on 127.0.0.1 and each page with a ```` ```mermaid ```` block is opened in
headless Chromium with every other host unreachable (names resolve to nothing, and any other
connection goes to a dead proxy). A probe added to a copy of the page waits for Material for
MkDocs to draw the diagrams, then reports what each one became. A page fails when a diagram is
not an SVG (the raw source is left, or an error is drawn instead), when an SVG lacks a label of
its source (a participant, a message, a state, a node), or when the page asked for anything not
on 127.0.0.1 for a script or for mermaid (a CDN). The theme's web font and the repository
widget's GitHub calls are left to fail: they are not the diagrams'. Every page with an image
(the benchmark charts) is opened the same way, and fails when an image does not load. Chromium
missing is a failure too, never a skip.

Prints `page: what` for each finding and exits 1; prints a summary and exits 0 when there is
none. `make docs-check` runs it; tests/functional/test_docs_diagrams.py runs it on the site and
on a copy with a broken diagram.
"""

from __future__ import annotations

import functools
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

#: A diagram as Material's custom fence writes it (pymdownx.superfences, fence_code_format).
DIAGRAM = re.compile(r'<pre class="mermaid"><code>(.*?)</code></pre>', re.DOTALL)
IMAGE = re.compile(r"<img\b")
PROBE_NAME = "_diagram_probe.html"
#: Put first in <head>: Material draws each diagram into a closed shadow root, which the probe
#: opens so that it can read the SVG. Waits (in Chromium's virtual time, which a loaded machine
#: does not run down) until EXPECTED diagrams are SVGs or 60 s have passed, then reports.
PROBE = """<script>(() => {
  const attach = Element.prototype.attachShadow;
  Element.prototype.attachShadow = function (init) {
    return attach.call(this, { ...init, mode: "open" });
  };
  const drawn = () => [...document.querySelectorAll("div.mermaid")].map((host) => {
    const svg = host.shadowRoot && host.shadowRoot.querySelector("svg");
    return svg ? svg.textContent : null;
  });
  let tries = 0;
  const look = () => {
    if (drawn().filter((text) => text !== null).length < EXPECTED && tries++ < 600) {
      setTimeout(look, 100);
      return;
    }
    const report = document.createElement("div");
    report.id = "diagram-report";
    report.textContent = JSON.stringify({
      loaded: typeof mermaid !== "undefined" && !(mermaid instanceof Element),
      drawn: drawn(),
      raw: [...new Set([...document.querySelectorAll("pre.mermaid, pre > code")]
        .map((e) => e.textContent)
        .filter((text) => /^\\s*(%%.*\\s*)*(stateDiagram|sequenceDiagram|flowchart)/.test(text)))],
      errors: document.body.innerText.includes("Syntax error"),
      images: [...document.images].filter((img) => !img.complete || img.naturalWidth === 0)
        .map((img) => img.getAttribute("src")),
      offsite: performance.getEntriesByType("resource")
        .filter((e) => e.initiatorType === "script" || e.name.includes("mermaid"))
        .map((e) => e.name).filter((name) => !name.startsWith(location.origin)),
    });
    document.body.appendChild(report);
  };
  window.addEventListener("load", () => setTimeout(look, 0));
})();</script>"""
#: Labels a diagram's SVG must show: a participant's or actor's name, the text after a colon
#: (messages, transitions, notes; not a style's), a quoted node label, an edge label between bars.
LABELS = (
    re.compile(r"^\s*(?:participant|actor)\s+\S+\s+as\s+(.+)$", re.MULTILINE),
    re.compile(r"^(?!\s*(?:classDef|style|linkStyle)\b)[^:\n%\"]*:\s*(.+)$", re.MULTILINE),
    re.compile(r'"([^"]+)"'),
    re.compile(r"\|([^|]+)\|"),
)


@dataclass(frozen=True, slots=True)
class Finding:
    """One page's problem."""

    page: str
    what: str

    def __str__(self) -> str:
        return f"{self.page}: {self.what}"


def diagram_pages(site: Path) -> dict[str, list[str]]:
    """Return each page with diagrams (its folder in ``site``, "" for the home page) and their
    sources."""
    pages: dict[str, list[str]] = {}
    for path in sorted(site.rglob("index.html")):
        sources = [html.unescape(m) for m in DIAGRAM.findall(path.read_text(encoding="utf-8"))]
        if sources:
            folder = path.parent.relative_to(site).as_posix()
            pages["" if folder == "." else folder] = sources
    return pages


def image_pages(site: Path) -> list[str]:
    """Return each page of ``site`` that shows an image (its folder, "" for the home page)."""
    return [
        "" if path.parent == site else path.parent.relative_to(site).as_posix()
        for path in sorted(site.rglob("index.html"))
        if IMAGE.search(path.read_text(encoding="utf-8"))
    ]


def labels(source: str) -> list[str]:
    """Return the labels of a diagram's source, each as it should read in the drawing."""
    found: list[str] = []
    source = re.sub(r"^\s*%%.*$", "", source, flags=re.MULTILINE)  # comments, directives
    for pattern in LABELS:
        found += [label.strip() for label in pattern.findall(source)]
    return [label for label in found if label]


def _squeezed(text: str) -> str:
    """Drop whitespace: a drawing wraps a label over lines, or joins its lines without one."""
    return re.sub(r"\s+", "", text)


@contextmanager
def serving(site: Path) -> Iterator[str]:
    """Serve ``site`` on 127.0.0.1; yield its base URL."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def chromium() -> str | None:
    """Return Chromium's path, if it is installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def open_offline(
    browser: str, url: str, width: int = 1280, height: int = 900, screenshot: Path | None = None
) -> str:
    """Load ``url`` in headless Chromium that reaches 127.0.0.1 only; return the page's DOM.

    With ``screenshot``, save a PNG of the window instead.
    """
    with tempfile.TemporaryDirectory() as profile:
        output = [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
        done = subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                "--proxy-server=127.0.0.1:9",
                f"--window-size={width},{height}",
                "--virtual-time-budget=70000",
                *output,
                url,
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        )
    return done.stdout


def check_page(browser: str, site: Path, base: str, page: str, sources: list[str]) -> list[str]:
    """Open ``page`` with the probe; return what is wrong with its diagrams."""
    folder = site / page
    text = (folder / "index.html").read_text(encoding="utf-8")
    probe = PROBE.replace("EXPECTED", str(len(sources)))
    (folder / PROBE_NAME).write_text(text.replace("<head>", "<head>" + probe, 1), "utf-8")
    try:
        dom = open_offline(
            browser, f"{base}/{page}/{PROBE_NAME}" if page else f"{base}/{PROBE_NAME}"
        )
    finally:
        (folder / PROBE_NAME).unlink()
    match = re.search(r'<div id="diagram-report">([^<]*)</div>', dom)
    if match is None:
        return ["the probe did not report (the page did not load)"]
    report = json.loads(html.unescape(match.group(1)))
    problems = [f"image did not load: {src}" for src in report["images"]]
    if sources and not report["loaded"]:
        problems.append("the local mermaid script did not load")
    if report["offsite"]:
        problems.append(f"requests off 127.0.0.1: {report['offsite']}")
    if report["errors"]:
        problems.append("a diagram was drawn as a syntax error")
    drawn = [text for text in report["drawn"] if text is not None]
    if len(drawn) != len(sources):
        problems.append(f"{len(drawn)} of {len(sources)} diagrams drawn as SVG")
    for raw in report["raw"]:
        problems.append(f"left as source text: {raw.strip()[:60]!r}")
    for number, (source, svg) in enumerate(zip(sources, drawn, strict=False), start=1):
        missing = [label for label in labels(source) if _squeezed(label) not in _squeezed(svg)]
        if missing:
            problems.append(f"diagram {number} lacks its labels {missing}")
    return problems


def check_site(site: Path) -> tuple[dict[str, list[str]], list[Finding]]:
    """Check every diagram page of ``site``; return the pages and the findings."""
    pages = diagram_pages(site)
    browser = chromium()
    if browser is None:
        return pages, [Finding("-", "chromium is not installed (apt-get install chromium)")]
    if not (site / "javascripts/mermaid.min.js").is_file():
        return pages, [Finding("-", "javascripts/mermaid.min.js is not in the site")]
    findings: list[Finding] = []
    shown = {page: pages.get(page, []) for page in sorted({*pages, *image_pages(site)})}
    with serving(site) as base:
        for page, sources in shown.items():
            problems = check_page(browser, site, base, page, sources)
            findings += [Finding(page or "(home)", problem) for problem in problems]
    return pages, findings


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
        print(f"{len(findings)} findings in {len(pages)} pages with diagrams")
        return 1
    if not pages:
        print("no page has a diagram")
        return 1
    count = sum(len(sources) for sources in pages.values())
    print(f"diagrams: {count} on {len(pages)} pages, each drawn offline in headless Chromium")
    print(f"images on {len(image_pages(Path(args[0])))} page(s): all loaded offline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
