"""The benchmarks' results as JSON, the one source of the charts and the README's figures.

``python -m benchmarks.run --json PATH`` and ``python -m benchmarks.bench_pipeline_cpu --json
PATH`` write these files; ``make bench-json`` writes both into ``benchmarks/results/`` and
``make charts`` (``scripts/charts.py``) draws from them. Times are in microseconds (``_us``) or
milliseconds (``_ms``), as the key says.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from benchmarks import cpu, imports, report, roundtrips

#: The JSON name of each variant of the CPU suite.
CPU_VARIANTS = {cpu.POWERTOOLS: "powertools", cpu.OURS: "ours", cpu.OURS_NATIVE: "ours_native"}


def run_info(command: str, load_before: tuple[float, float, float] | None) -> dict[str, Any]:
    """Return the command, the commit measured and where it ran: what the charts' captions say."""
    git = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    commit = git.stdout.strip() if git.returncode == 0 else "unknown"
    return {"command": command, "commit": commit, **report.machine_facts(load_before)}


def cpu_json(results: list[cpu.ScenarioResult]) -> list[dict[str, Any]]:
    """Return the CPU suite's rows: overhead per call over the bare handler, per variant."""
    return [
        {
            "event": result.scenario.event.name,
            "event_kb": round(result.scenario.event.size_bytes() / 1024),
            "config": result.scenario.config_label,
            "path": result.scenario.path,
            "calls": result.scenario.iterations,
            "overhead_us": {
                name: round(result.overhead_ns(variant) / 1000, 2)
                for variant, name in CPU_VARIANTS.items()
            },
            "spread": round(max(result.spread(v) for v in CPU_VARIANTS), 3),
        }
        for result in results
    ]


def roundtrips_json(results: list[roundtrips.PathResult]) -> list[dict[str, Any]]:
    """Return the requests each library sent on each path."""
    return [
        {"path": result.path, "expected": result.expected, "requests": result.operations}
        for result in results
    ]


def imports_json(suite: imports.ImportSuite) -> list[dict[str, Any]]:
    """Return each import statement's times over fresh interpreters."""
    return [
        {
            "statement": statement,
            "median_ms": round(result.median_ms, 2),
            "min_ms": round(min(result.samples_ms), 2),
            "max_ms": round(max(result.samples_ms), 2),
            "runs": len(result.samples_ms),
            "modules": result.module_count,
        }
        for statement, result in suite.results.items()
    ]


def suites_json(results: report.Results) -> dict[str, Any]:
    """Return what ``benchmarks.run`` measured, suite by suite (absent suites are left out)."""
    data: dict[str, Any] = {"run": run_info(results.command, results.load_before)}
    if results.cpu is not None:
        data["cpu"] = cpu_json(results.cpu)
    if results.roundtrips is not None:
        data["roundtrips"] = roundtrips_json(results.roundtrips)
    if results.imports is not None:
        data["imports"] = imports_json(results.imports)
    return data


def write(path: str | Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` as indented JSON with a final newline (a stable diff)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
