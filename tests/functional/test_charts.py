"""The benchmark charts and figures are what `make charts` draws from the committed JSON.

scripts/charts.py draws docs/assets/charts/*.svg and the blocks between the `charts` markers of
README.md and docs/benchmarks.md from benchmarks/results/*.json; scripts/check_diagrams.py fails
a built page whose chart does not load in headless Chromium.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from scripts import charts
from scripts.check_diagrams import check_page, chromium, image_pages, serving


@pytest.fixture(scope="module")
def drawn() -> dict[Path, str]:
    """Draw every chart and figure block once from the committed JSON."""
    return charts.outputs(charts.load())


def test_committed_charts_and_figures_are_what_the_json_draws(drawn: dict[Path, str]) -> None:
    """Every chart, and the README's and benchmarks page's figures, match a fresh drawing."""
    stale = [
        path.relative_to(charts.ROOT).as_posix()
        for path, text in drawn.items()
        if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]
    assert [] == stale, "run `make charts` and commit what it writes"
    assert sorted(charts.CHARTS.glob("*.svg")) == sorted(p for p in drawn if p.suffix == ".svg")


def test_a_chart_carries_no_date_and_names_the_shared_machine(drawn: dict[Path, str]) -> None:
    """The SVG has no timestamp (the same JSON gives the same bytes) and says the run was noisy."""
    svg = drawn[charts.CHARTS / "batch-requests.svg"]
    assert "<dc:date>" not in svg
    assert "shared with other jobs" in svg


def test_a_figure_block_needs_its_markers() -> None:
    """A page without the markers is an error, not a block appended somewhere."""
    with pytest.raises(ValueError, match="<!-- charts:readme:start -->"):
        charts.replace_block("no markers here", "charts:readme", "figures")


def test_the_benchmarks_page_shows_every_chart(docs_site: Path, drawn: dict[Path, str]) -> None:
    """The built page links each chart, and the site check opens it."""
    page = (docs_site / "benchmarks" / "index.html").read_text(encoding="utf-8")
    for path in drawn:
        if path.suffix == ".svg":
            assert f'src="../assets/charts/{path.name}"' in page
    assert "benchmarks" in image_pages(docs_site)


def test_a_chart_that_does_not_load_fails_the_site_check(docs_site: Path, tmp_path: Path) -> None:
    """A chart missing from the built site is reported by the headless Chromium check."""
    copy = tmp_path / "site"
    for part in ("assets", "javascripts", "benchmarks"):
        shutil.copytree(docs_site / part, copy / part)
    (copy / "assets" / "charts" / "batch-wall.svg").unlink()
    browser = chromium()
    assert browser is not None, "chromium is not installed (apt-get install chromium)"
    with serving(copy) as base:
        problems = check_page(browser, copy, base, "benchmarks", [])
    assert ["image did not load: ../assets/charts/batch-wall.svg"] == problems
