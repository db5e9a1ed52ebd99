"""Draw the benchmark charts and the README's figures from the committed JSON results.

Usage: `python scripts/charts.py` (`make charts`) after `make bench-json` has written
benchmarks/results/*.json; `--check` writes nothing and exits 1 when a committed chart or
figure is not what the JSON draws.

Reads `invocation.json` (`python -m benchmarks.run --json`: CPU per invocation, import times)
and `batches.json` (`python -m benchmarks.bench_pipeline_cpu --json`: 100-record batches on real
botocore clients). Writes the SVG charts into docs/assets/charts/ and the blocks between the
`charts` markers of README.md and docs/benchmarks.md. Every figure shown comes from the JSON;
none is typed. The SVG files are byte for byte the same on every run from the same JSON: no
date in their metadata, and a fixed salt for the ids matplotlib derives from hashes.
"""

from __future__ import annotations

import io
import json
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
CHARTS = ROOT / "docs" / "assets" / "charts"
README = ROOT / "README.md"
BENCHMARKS_PAGE = ROOT / "docs" / "benchmarks.md"
#: Where the README (shown alone on the package index) finds the charts.
RAW = (
    "https://raw.githubusercontent.com/idempotent-lambda/idempotent-lambda/main/docs/assets/charts"
)
BATCH_SIZE = 100
SOURCES = ("sqs", "fifo", "stream", "kinesis", "kafka", "kafka-fail")
OURS, POWERTOOLS = "#1f6fb2", "#bdbdbd"
#: Fixed look and output: the font comes with matplotlib (nothing fetched) and the text is drawn
#: as paths, so a browser without that font shows the same chart.
STYLE = {
    "svg.hashsalt": "idempotent-lambda",
    "svg.fonttype": "path",
    "font.family": "DejaVu Sans",
    "font.size": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.facecolor": "white",
}
HANDLER_IMPORT = "from idempotent_lambda import"
POWERTOOLS_IMPORT = "from aws_lambda_powertools"


def load() -> dict[str, Any]:
    """Return the committed results, by file stem."""
    return {
        name: json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))
        for name in ("invocation", "batches")
    }


def batch(results: dict[str, Any], library: str, source: str) -> dict[str, float]:
    """Return the medians of ``library`` (``now`` or ``powertools``) for a 100-record batch."""
    measured: dict[str, float] = results["batches"][library][f"{source}/{BATCH_SIZE}"]
    return measured


def ratios(results: dict[str, Any], field: str) -> list[float]:
    """Return ours / Powertools for ``field`` of each source's first delivery."""
    return [
        ours / theirs
        for ours, theirs in zip(
            fields(results, "now", field), fields(results, "powertools", field), strict=True
        )
    ]


def statement(results: dict[str, Any], prefix: str) -> dict[str, Any]:
    """Return the import suite's row whose statement starts with ``prefix``."""
    rows: list[dict[str, Any]] = results["invocation"]["imports"]
    return next(row for row in rows if row["statement"].startswith(prefix))


def note(run: dict[str, Any]) -> str:
    """Return the line each chart carries: when, on what, and that the machine was shared."""
    load = run["load_before"][0]
    return (
        f"{run['date'][:10]}, {run['nproc']} vCPUs shared with other jobs "
        f"(load {load:.1f}): noisy; ratios are of one side-by-side run"
    )


def bars(
    axes: Any,
    labels: Sequence[str],
    ours: Sequence[float],
    theirs: Sequence[float],
    fmt: str,
) -> None:
    """Draw ours and Powertools side by side per label, each bar with its value."""
    width = 0.38
    for offset, values, colour, name in (
        (-width / 2, ours, OURS, "idempotent_lambda"),
        (width / 2, theirs, POWERTOOLS, "Powertools"),
    ):
        drawn = axes.bar(
            [i + offset for i in range(len(labels))], values, width, color=colour, label=name
        )
        axes.bar_label(drawn, labels=[format(v, fmt) for v in values], fontsize=8, padding=2)
    axes.set_xticks(range(len(labels)), labels)
    axes.margins(y=0.15)


def figure(
    draw: Callable[[Any], None],
    size: tuple[float, float],
    title: str,
    run: dict[str, Any],
    panels: int = 1,
) -> str:
    """Return the SVG text of a figure of ``panels`` axes that ``draw`` fills, with ``title``
    above and the run's note below."""
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    with rc_context(STYLE):
        fig = Figure(figsize=size, layout="constrained")
        axes = fig.subplots(1, panels)
        draw(axes)
        fig.suptitle(title, fontsize=11)
        fig.supxlabel(note(run), fontsize=8, color="#555555")
        out = io.StringIO()
        fig.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
    return out.getvalue()


def batch_chart(results: dict[str, Any], field: str, title: str, fmt: str) -> str:
    """Return a chart of ``field`` of a first delivery per source, ours against Powertools."""

    def draw(axes: Any) -> None:
        labels = [f"{s}\n{r:.2f}x" for s, r in zip(SOURCES, ratios(results, field), strict=True)]
        bars(axes, labels, fields(results, "now", field), fields(results, "powertools", field), fmt)
        axes.set_xlabel(f"source, ours / Powertools ({BATCH_SIZE} records, first delivery)")
        axes.legend(frameon=False, loc="upper left", bbox_to_anchor=(1, 1))

    return figure(draw, (8, 3.6), title, results["batches"]["run"])


def invocation_chart(results: dict[str, Any]) -> str:
    """Return the per-invocation CPU overhead chart: one panel per event size."""
    rows = results["invocation"]["cpu"]

    def draw(panels: Any) -> None:
        for axes, event, unit, scale in zip(
            panels, ("small", "large"), ("µs", "ms"), (1, 1000), strict=True
        ):
            mine = [row for row in rows if row["event"] == event]
            labels = [
                f"{row['config'].replace('key + validation', 'key+valid.')}\n{row['path']}\n"
                f"{row['overhead_us']['ours'] / row['overhead_us']['powertools']:.2f}x"
                for row in mine
            ]
            bars(
                axes,
                labels,
                [row["overhead_us"]["ours"] / scale for row in mine],
                [row["overhead_us"]["powertools"] / scale for row in mine],
                ".0f" if scale == 1 else ".1f",
            )
            axes.set_title(
                f"{event} event ({mine[0]['event_kb']} KB): {unit} per call", fontsize=10
            )
            axes.tick_params(axis="x", labelsize=8)
        panels[1].legend(frameon=False, loc="upper left")

    title = "CPU overhead per invocation over a bare handler (in-memory stores), ours / Powertools"
    return figure(draw, (10, 4), title, results["invocation"]["run"], panels=2)


def cold_start_chart(results: dict[str, Any]) -> str:
    """Return the import-time chart: what a cold start pays to import the handler's names."""
    ours, theirs = statement(results, HANDLER_IMPORT), statement(results, POWERTOOLS_IMPORT)
    boto3 = statement(results, "import boto3")
    rows = [("idempotent_lambda", ours), ("Powertools", theirs), ("import boto3", boto3)]

    def draw(axes: Any) -> None:
        drawn = axes.barh(
            [name for name, _ in rows][::-1],
            [row["median_ms"] for _, row in rows][::-1],
            color=["#e0e0e0", POWERTOOLS, OURS],
        )
        axes.bar_label(
            drawn,
            labels=[f"{row['median_ms']:.0f} ms" for _, row in rows][::-1],
            fontsize=8,
            padding=2,
        )
        axes.margins(x=0.2)
        axes.set_xlabel(
            f"ms, median of {ours['runs']} fresh interpreters; ours / Powertools "
            f"{ours['median_ms'] / theirs['median_ms']:.2f}x"
        )

    title = "Cold start: importing the handler's names"
    return figure(draw, (8, 2.8), title, results["invocation"]["run"])


def charts(results: dict[str, Any]) -> dict[str, str]:
    """Return every chart's SVG text by file name."""
    return {
        "batch-wall.svg": batch_chart(results, "first_ms", "Wall time of a batch (ms)", ".0f"),
        "batch-requests.svg": batch_chart(
            results, "first_req", "DynamoDB requests per record", ".2f"
        ),
        "batch-cpu.svg": batch_chart(results, "first_cpu_us", "Client CPU per record (µs)", ".0f"),
        "invocation-cpu.svg": invocation_chart(results),
        "cold-start.svg": cold_start_chart(results),
    }


def span(values: Sequence[float], fmt: str, unit: str = "") -> str:
    """Return ``low to high`` (or one value when they round alike), each followed by ``unit``."""
    low, high = format(min(values), fmt) + unit, format(max(values), fmt) + unit
    return low if low == high else f"{low} to {high}"


def prose(text: str) -> str:
    """Return ``text`` wrapped as the pages wrap their paragraphs."""
    return textwrap.fill(text, width=96, break_long_words=False, break_on_hyphens=False)


def fields(results: dict[str, Any], library: str, field: str) -> list[float]:
    """Return ``field`` of each source's first delivery for ``library``."""
    return [batch(results, library, source)[field] for source in SOURCES]


def summary(results: dict[str, Any]) -> list[str]:
    """Return the figures both pages quote, as Markdown: a sentence, a table per source, a
    sentence."""
    run = results["batches"]["run"]
    small = [row for row in results["invocation"]["cpu"] if row["event"] == "small"]
    ours, theirs = statement(results, HANDLER_IMPORT), statement(results, POWERTOOLS_IMPORT)
    rows = []
    for source in SOURCES:
        mine, pt = batch(results, "now", source), batch(results, "powertools", source)
        cells = [f"{mine['first_req']:.2f} / {pt['first_req']:.2f}"]
        for field in ("first_ms", "first_cpu_us"):
            cells.append(f"{mine[field]:.0f} / {pt[field]:.0f} ({mine[field] / pt[field]:.2f}x)")
        rows.append(f"| {source} | {' | '.join(cells)} |")
    cpu_ratios = [row["overhead_us"]["ours"] / row["overhead_us"]["powertools"] for row in small]
    return [
        prose(
            f"Measured {run['date']} at commit {run['commit']} against Powertools "
            f"{run['packages']['aws-lambda-powertools']} on a {run['nproc']}-vCPU machine shared "
            f"with other jobs (load average {run['load_before'][0]:.1f} as the batch run began), "
            "so absolute times are noisy; each ratio compares the two libraries side by side in "
            f"one run. A batch of {BATCH_SIZE} records, first delivery, on real botocore clients "
            "against moto's DynamoDB server behind 5 ms, each library with its own client "
            "(`kafka-fail`: one record a tenth of the way in fails), medians of the runs:"
        ),
        "",
        "| source | DynamoDB requests per record (ours / Powertools) | wall ms (ours / PT) | "
        "client CPU µs per record (ours / PT) |",
        "|---|---|---|---|",
        *rows,
        "",
        prose(
            f"Requests per record: {span(fields(results, 'now', 'first_req'), '.2f')} against "
            f"{span(fields(results, 'powertools', 'first_req'), '.2f')}; client CPU "
            f"{span(ratios(results, 'first_cpu_us'), '.2f', 'x')} Powertools' on every source. Per "
            f"invocation (in-memory stores, a {small[0]['event_kb']} KB API Gateway event): "
            f"{span(cpu_ratios, '.2f', 'x')} Powertools' CPU overhead. A cold start imports the "
            f"handler's names in {ours['median_ms']:.0f} ms against Powertools' "
            f"{theirs['median_ms']:.0f} ms ({ours['median_ms'] / theirs['median_ms']:.2f}x)."
        ),
    ]


def readme_block(results: dict[str, Any]) -> str:
    """Return the README's benchmark block: the figures and two charts, links absolute."""
    return "\n".join(
        [
            *summary(results),
            "",
            f"![DynamoDB requests per record by source]({RAW}/batch-requests.svg)",
            f"![Wall time of a 100-record batch by source]({RAW}/batch-wall.svg)",
        ]
    )


def page_block(results: dict[str, Any]) -> str:
    """Return the benchmarks page's charts block: the figures, then every chart."""
    titles = {
        "batch-wall.svg": "Wall time of a 100-record batch by source",
        "batch-requests.svg": "DynamoDB requests per record by source",
        "batch-cpu.svg": "Client CPU per record by source",
        "invocation-cpu.svg": "CPU overhead per invocation",
        "cold-start.svg": "Cold start: import time of the handler's names",
    }
    commands = [results[name]["run"]["command"] for name in ("invocation", "batches")]
    return "\n".join(
        [
            *summary(results),
            "",
            *[f"![{title}](assets/charts/{name})\n" for name, title in titles.items()],
            "Commands of this run (`make bench-json` runs both):",
            "",
            "```sh",
            *[f".venv/bin/{command}" for command in commands],
            "```",
        ]
    )


def replace_block(text: str, name: str, block: str) -> str:
    """Return ``text`` with ``block`` between the ``name`` markers (which must be there)."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    before, found, rest = text.partition(start)
    if not found or end not in rest:
        raise ValueError(f"the {start} and {end} markers are missing")
    return f"{before}{start}\n{block}\n{end}{rest.partition(end)[2]}"


def outputs(results: dict[str, Any]) -> dict[Path, str]:
    """Return every file ``make charts`` writes, with its text."""
    files = {CHARTS / name: svg for name, svg in charts(results).items()}
    for page, name, block in (
        (README, "charts:readme", readme_block(results)),
        (BENCHMARKS_PAGE, "charts:page", page_block(results)),
    ):
        files[page] = replace_block(page.read_text(encoding="utf-8"), name, block)
    return files


def main(argv: list[str] | None = None) -> int:
    """Write the charts and blocks; with ``--check``, report the stale ones instead."""
    args = sys.argv[1:] if argv is None else argv
    stale = []
    for path, text in outputs(load()).items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path.relative_to(ROOT).as_posix())
        if "--check" not in args:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    verb = "differ from what the JSON draws" if "--check" in args else "written"
    print(f"{verb}: {', '.join(stale)}" if stale else "charts and figures: up to date")
    return 1 if stale and "--check" in args else 0


if __name__ == "__main__":
    sys.exit(main())
