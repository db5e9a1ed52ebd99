"""Markdown rendering of the results, machine description, and the docs/benchmarks.md writer."""

from __future__ import annotations

import datetime
import os
import platform
import re
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks import cpu, imports, roundtrips

START_MARKER = "<!-- benchmarks:results:start -->"
END_MARKER = "<!-- benchmarks:results:end -->"
IMPORT_TARGET = 0.15


@dataclass
class Results:
    """Whatever suites ran (None for those that did not)."""

    cpu: list[cpu.ScenarioResult] | None = None
    roundtrips: list[roundtrips.PathResult] | None = None
    imports: imports.ImportSuite | None = None
    command: str = "python -m benchmarks.run"
    load_before: tuple[float, float, float] | None = None


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_facts(load_before: tuple[float, float, float] | None) -> dict[str, Any]:
    """Return where and with what the benchmarks ran, as values (the JSON results keep them)."""
    return {
        "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        "cpu": _cpu_model(),
        "nproc": os.cpu_count(),
        "load_before": [round(v, 2) for v in load_before] if load_before is not None else None,
        "python": f"{platform.python_version()} ({platform.python_implementation()})",
        "system": f"{platform.system()} {platform.release()}",
        "packages": {
            name: _version(name)
            for name in ("aws-lambda-powertools", "boto3", "jmespath", "moto", "pydantic")
        },
    }


def machine(load_before: tuple[float, float, float] | None) -> list[str]:
    """Return bullet lines describing where and with what the benchmarks ran."""
    facts = machine_facts(load_before)
    load = ", ".join(f"{value:.2f}" for value in load_before) if load_before is not None else "n/a"
    versions = ", ".join(f"{name} {version}" for name, version in facts["packages"].items())
    return [
        f"- Date: {facts['date']}",
        f"- CPU: {facts['cpu']}; nproc: {facts['nproc']}",
        f"- Load average (1/5/15 min) when the run started: {load}",
        f"- Python {facts['python']}, {facts['system']}",
        f"- Packages: {versions}",
    ]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _us(ns: float) -> str:
    return f"{ns / 1000:,.1f}"


def _cpu_target_ok(result: cpu.ScenarioResult) -> bool | None:
    target = result.scenario.target()
    return None if target is None else result.ratio(cpu.OURS) <= target


def cpu_section(results: list[cpu.ScenarioResult]) -> list[str]:
    """Return the CPU overhead table."""
    rows = []
    for result in results:
        scenario = result.scenario
        target = scenario.target()
        ok = _cpu_target_ok(result)
        noise = max(result.spread(variant) for variant in cpu.VARIANTS[1:])
        rows.append(
            [
                f"{scenario.event.name} ({scenario.event.size_bytes() / 1024:.0f} KB)",
                scenario.config_label,
                scenario.path,
                _us(result.overhead_ns(cpu.POWERTOOLS)),
                _us(result.overhead_ns(cpu.OURS)),
                _us(result.overhead_ns(cpu.OURS_NATIVE)),
                f"**{result.ratio(cpu.OURS):.2f}x**",
                f"{result.ratio(cpu.OURS_NATIVE):.2f}x",
                "—" if target is None else f"<= {target:.1f}x",
                "—" if ok is None else _verdict(ok),
                f"{noise:.0%}",
                str(scenario.iterations),
            ]
        )
    header = [
        "event",
        "config",
        "path",
        "Powertools µs",
        "ours default µs",
        "ours native µs",
        "ratio (default)",
        "ratio (native)",
        "guard",
        "result",
        "spread",
        "calls/repeat",
    ]
    return [
        "### Per-invocation CPU overhead (in-memory stores)",
        "",
        "Overhead = median CPU time per call minus the bare handler's; ratio = ours / Powertools "
        "(lower is better). `ratio (default)` is our default config (Powertools' record format, "
        "md5, as Powertools) and is the one held to the guard; `ratio (native)` is "
        '`record_format="native"` (sha256, canonical JSON). `spread` is '
        "(max - min) / median over the repeats of the noisiest variant.",
        "",
        *_table(header, rows),
    ]


def roundtrips_section(results: list[roundtrips.PathResult]) -> list[str]:
    """Return the round-trip table."""
    rows = [
        [
            result.path,
            str(result.expected),
            str(len(result.operations[roundtrips.OURS])),
            " + ".join(result.operations[roundtrips.OURS]) or "—",
            str(len(result.operations[roundtrips.POWERTOOLS])),
            " + ".join(result.operations[roundtrips.POWERTOOLS]) or "—",
            _verdict(result.passed()),
        ]
        for result in results
    ]
    header = ["path", "expected", "ours", "ours requests", "Powertools", "Powertools requests"]
    return [
        "### DynamoDB round trips per invocation (moto server on 127.0.0.1)",
        "",
        *_table([*header, "result"], rows),
    ]


def imports_section(suite: imports.ImportSuite) -> list[str]:
    """Return the import-time table and what our import pulls in."""
    rows = []
    for statement, result in suite.results.items():
        rows.append(
            [
                f"`{statement}`",
                f"{result.median_ms:.1f}",
                f"{min(result.samples_ms):.1f}-{max(result.samples_ms):.1f}",
                f"{suite.ratio(statement):.2f}x",
                str(len(result.samples_ms)),
                str(result.module_count),
            ]
        )
    ratio = suite.ratio()
    handler = imports.OURS_HANDLER
    where = ", ".join(f"{name} {ms:.1f}" for name, ms in suite.cost_by_package_ms[:12])
    header = ["statement", "median ms", "min-max ms", "vs boto3", "runs", "modules in sys.modules"]
    return [
        "### Import time (fresh interpreter per run)",
        "",
        *_table(header, rows),
        "",
        f"- `import idempotent_lambda` / `import boto3`: **{ratio:.2f}x** "
        f"(target <= {IMPORT_TARGET}x): {_verdict(ratio <= IMPORT_TARGET)}",
        f"- Handler import / `import boto3`: {suite.ratio(handler):.2f}x (no target; what a cold "
        "start of a decorated handler module pays)",
        "- boto3 / botocore / pydantic / Powertools loaded: "
        f"by `import idempotent_lambda`: {', '.join(suite.forbidden_loaded()) or 'none'}; "
        f"by the handler import: {', '.join(suite.forbidden_loaded(handler)) or 'none'} — "
        f"{_verdict(not suite.forbidden_loaded() and not suite.forbidden_loaded(handler))}",
        "- Notable modules loaded: by `import idempotent_lambda`: "
        f"{', '.join(suite.notable_loaded()) or 'none'}; by the handler import: "
        f"{', '.join(suite.notable_loaded(handler)) or 'none'}",
        "- Where the handler import's time goes (self ms summed per top-level package, "
        f"`-X importtime`, which overstates): {where or 'nothing'}",
    ]


def summary_section(results: Results) -> list[str]:
    """Return the guard table (issue 10): CPU ratios, round trips, import laziness."""
    rows = []
    if results.cpu is not None:
        groups = {
            "small event, every path and config: overhead <= 0.5x Powertools": [
                r for r in results.cpu if r.scenario.event.name == "small"
            ],
            "large event, every path and config: overhead <= 0.6x Powertools": [
                r for r in results.cpu if r.scenario.event.name == "large"
            ],
        }
        for label, group in groups.items():
            if group:
                worst = max(r.ratio(cpu.OURS) for r in group)
                ok = all(_cpu_target_ok(r) for r in group)
                rows.append([label, f"worst {worst:.2f}x", _verdict(ok)])
    if results.roundtrips is not None:
        measured = "/".join(str(len(r.operations[roundtrips.OURS])) for r in results.roundtrips)
        ok = all(r.passed() for r in results.roundtrips)
        rows.append(["round trips first/replay/cached/raised = 2/1/0/2", measured, _verdict(ok)])
    if results.imports is not None:
        ratio = results.imports.ratio()
        rows.append(
            [
                f"`import idempotent_lambda` <= {IMPORT_TARGET}x `import boto3`",
                f"{ratio:.2f}x",
                _verdict(ratio <= IMPORT_TARGET),
            ]
        )
        forbidden = sorted(
            {
                *results.imports.forbidden_loaded(),
                *results.imports.forbidden_loaded(imports.OURS_HANDLER),
            }
        )
        rows.append(
            [
                "no boto3/botocore/pydantic after importing (package, or the handler's names)",
                ", ".join(forbidden) or "none loaded",
                _verdict(not forbidden),
            ]
        )
    return ["### Guard", "", *_table(["guard", "measured", "result"], rows)]


def failed_targets(results: Results) -> int:
    """Return how many guard rows failed."""
    text = "\n".join(summary_section(results))
    return len(re.findall(r"\| FAIL \|", text))


def render(results: Results) -> str:
    """Return the whole results block as Markdown."""
    lines = [
        f"Produced by `{results.command}`.",
        "",
        *machine(results.load_before),
        "",
        *summary_section(results),
    ]
    if results.cpu is not None:
        lines += ["", *cpu_section(results.cpu)]
    if results.roundtrips is not None:
        lines += ["", *roundtrips_section(results.roundtrips)]
    if results.imports is not None:
        lines += ["", *imports_section(results.imports)]
    return "\n".join(lines) + "\n"


def write(path: Path, block: str) -> None:
    """Put ``block`` between the result markers of ``path`` (appending markers if absent)."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    section = f"{START_MARKER}\n{block}{END_MARKER}"
    if START_MARKER in text and END_MARKER in text:
        before, rest = text.split(START_MARKER, 1)
        _, after = rest.split(END_MARKER, 1)
        text = before + section + after
    else:
        text = text.rstrip("\n") + "\n\n## Results\n\n" + section + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def command_line(module: str = "benchmarks.run") -> str:
    """Return the command as typed, for the record."""
    return " ".join([f"python -m {module}", *sys.argv[1:]])
