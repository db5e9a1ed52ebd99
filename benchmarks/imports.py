"""Import time of ``idempotent_lambda`` vs ``boto3``, each in a fresh interpreter.

Statements timed: ``import idempotent_lambda`` (the target), the import a handler module really
does (``from idempotent_lambda import idempotent, IdempotencyConfig, DynamoDBPersistenceLayer``:
the package resolves names lazily, so this is what a cold start pays), ``import boto3``, and
Powertools' equivalent handler import, for reference.

Every run starts a new ``python`` process that times only the import statement with
``time.perf_counter_ns`` (``sys`` and ``time`` are built in, so nothing else is imported before
the clock starts) and reports which notable modules the import loaded. Interpreter start-up is
excluded, which is what ``python -c "import X"`` minus ``python -c "pass"`` estimates, with less
noise. The first run of each statement is a discarded warm-up (it fills a private bytecode cache,
see `_child_env`, and the page cache); the median of the remaining runs is reported.

``python -X importtime`` runs of the handler import then attribute its time to top-level
packages (self time), to show what to defer.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

OURS = "import idempotent_lambda"
#: What a handler module's cold start actually pays: the names resolved (the package loads them
#: on first access).
OURS_HANDLER = (
    "from idempotent_lambda import idempotent, IdempotencyConfig, DynamoDBPersistenceLayer"
)
BOTO3 = "import boto3"
POWERTOOLS = (
    "from aws_lambda_powertools.utilities.idempotency import idempotent, IdempotencyConfig, "
    "DynamoDBPersistenceLayer"
)
STATEMENTS = (OURS, OURS_HANDLER, BOTO3, POWERTOOLS)
#: Must not be loaded by ``import idempotent_lambda`` (only when a DynamoDB store is used).
FORBIDDEN = ("boto3", "botocore", "pydantic", "pydantic_core", "aws_lambda_powertools")
#: Worth knowing about when they are loaded: each costs milliseconds on its own.
NOTABLE = (
    "asyncio",
    "ssl",
    "concurrent.futures",
    "inspect",
    "dataclasses",
    "logging",
    "typing",
    "uuid",
    "decimal",
    "secrets",
    "hashlib",
    "jmespath",
    "urllib3",
    "dateutil",
)
_CHILD = """
import sys, time
started = time.perf_counter_ns()
{statement}
elapsed = time.perf_counter_ns() - started
print(elapsed)
print(len(sys.modules))
print(",".join(name for name in {names!r} if name in sys.modules))
"""
ROOT = Path(__file__).resolve().parent.parent
_PYCACHE = Path(tempfile.gettempdir()) / "idempotent-lambda-bench-pycache"


def _child_env() -> dict[str, str]:
    """Return the children's environment: bytecode cached for every module, outside the repo.

    With ``PYTHONDONTWRITEBYTECODE`` set (as in some dev shells) our sources would be compiled
    on every run while boto3's ``.pyc`` files from ``pip install`` are used: an unfair race. A
    private ``PYTHONPYCACHEPREFIX`` gives every module, ours and boto3's alike, a bytecode cache
    filled by the warm-up run, the way a deployed package (``pip`` compiles on install) is.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(_PYCACHE)
    return env


@dataclass
class ImportResult:
    """Import time of one statement over several fresh interpreters."""

    statement: str
    samples_ms: list[float]
    module_count: int
    loaded: list[str]

    @property
    def median_ms(self) -> float:
        """Return the median import time in milliseconds."""
        return statistics.median(self.samples_ms)


@dataclass
class ImportSuite:
    """Everything the import suite measured."""

    results: dict[str, ImportResult]
    cost_by_package_ms: list[tuple[str, float]] = field(default_factory=list)

    def ratio(self, statement: str = OURS) -> float:
        """Return the statement's import time over boto3's."""
        return self.results[statement].median_ms / self.results[BOTO3].median_ms

    def forbidden_loaded(self, statement: str = OURS) -> list[str]:
        """Return the forbidden modules the statement loaded."""
        return [name for name in self.results[statement].loaded if name in FORBIDDEN]

    def notable_loaded(self, statement: str = OURS) -> list[str]:
        """Return the notable modules the statement loaded."""
        return [name for name in self.results[statement].loaded if name in NOTABLE]


def _run_child(statement: str) -> tuple[float, int, list[str]]:
    code = _CHILD.format(statement=statement, names=FORBIDDEN + NOTABLE)
    completed = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=_child_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    elapsed, count, loaded = [*completed.stdout.splitlines(), ""][:3]
    return int(elapsed) / 1e6, int(count), [name for name in loaded.split(",") if name]


def time_import(statement: str, runs: int) -> ImportResult:
    """Run ``statement`` in ``runs`` fresh interpreters (after one discarded warm-up)."""
    _run_child(statement)
    samples, count, loaded = [], 0, []
    for _ in range(runs):
        elapsed, count, loaded = _run_child(statement)
        samples.append(elapsed)
    return ImportResult(statement, samples, count, loaded)


def import_cost_by_package(statement: str = OURS_HANDLER, runs: int = 3) -> list[tuple[str, float]]:
    """Return where ``statement``'s import time goes: self time summed per top-level package.

    Parsed from ``python -X importtime -c statement`` (median over ``runs``), counting only the
    modules imported by the statement (not by interpreter start-up). Self times are used, not
    cumulative ones, because lazily imported modules are not nested under their importer.
    """
    per_package: dict[str, list[float]] = {}
    for _ in range(runs):
        completed = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", statement],
            cwd=ROOT,
            env=_child_env(),
            capture_output=True,
            text=True,
            check=True,
        )
        totals: dict[str, float] = {}
        for name, self_us in _statement_rows(completed.stderr.splitlines()):
            package = name.split(".", 1)[0]
            totals[package] = totals.get(package, 0.0) + self_us / 1000
        for package, total in totals.items():
            per_package.setdefault(package, []).append(total)
    ranked = [(name, statistics.median(times)) for name, times in per_package.items()]
    return sorted(ranked, key=lambda item: item[1], reverse=True)


def _statement_rows(lines: Sequence[str]) -> list[tuple[str, float]]:
    """Parse ``-X importtime`` output into (module, self µs), after interpreter start-up."""
    rows: list[tuple[str, float]] = []
    for line in lines:
        if not line.startswith("import time:") or line.count("|") != 2:
            continue
        self_us, _, name = line.removeprefix("import time:").split("|")
        if not self_us.strip().isdigit():
            continue  # the header line
        if name.strip() == "site" and not name.startswith("  "):
            rows.clear()  # everything so far was start-up
            continue
        rows.append((name.strip(), float(self_us)))
    return rows


def run(runs: int, progress: Callable[[str], None] = lambda _: None) -> ImportSuite:
    """Run the import suite."""
    results = {}
    for statement in STATEMENTS:
        results[statement] = time_import(statement, runs)
        progress(f"imports: {statement}: {results[statement].median_ms:.1f} ms")
    return ImportSuite(results, import_cost_by_package())
