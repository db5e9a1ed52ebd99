"""What a user meets before any handler runs: the version, the CLI's --version, the extras."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import idempotent_lambda
from idempotent_lambda.testing import local_dynamodb

ROOT = Path(__file__).resolve().parents[2]


def pyproject() -> dict[str, Any]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the tests run on 3.11
    return dict(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8")))


def test_the_version_is_written_once() -> None:
    """pyproject.toml reads the version from the package instead of repeating it."""
    project = pyproject()["project"]
    assert "version" not in project
    assert "version" in project["dynamic"]
    dynamic = pyproject()["tool"]["setuptools"]["dynamic"]
    assert {"attr": "idempotent_lambda.__version__"} == dynamic["version"]


def test_cli_prints_the_version() -> None:
    """``idempotent-lambda --version`` answers with the package's version and exits 0."""
    result = subprocess.run(
        [sys.executable, "-m", "idempotent_lambda", "--version"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=120,
    )
    assert 0 == result.returncode, result.stderr
    assert f"idempotent-lambda {idempotent_lambda.__version__}" == result.stdout.strip()


def test_local_dynamodb_without_moto_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without moto's server, the error says which extra to install."""
    monkeypatch.setitem(sys.modules, "moto.server", None)
    with pytest.raises(ImportError, match=r"idempotent-lambda\[testing\]"), local_dynamodb():
        pass


def test_dev_tools_are_not_published_extras() -> None:
    """Extras are what users need (pydantic, redis, valkey, durable, testing); tooling: groups."""
    metadata = pyproject()
    extras = metadata["project"]["optional-dependencies"]
    assert {"pydantic", "redis", "valkey", "durable", "otel", "testing"} == set(extras)
    assert any(requirement.startswith("moto[server]") for requirement in extras["testing"])
    assert {"dev", "docs", "demo", "release"} <= set(metadata["dependency-groups"])


def test_the_durable_integration_never_imports_the_sdk() -> None:
    """`idempotent_lambda.durable` reads the SDK's objects it is handed; it imports nothing."""
    code = (
        "import sys, idempotent_lambda, idempotent_lambda.durable; "
        "print(any(m.startswith('aws_durable_execution_sdk_python') for m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert "False" == result.stdout.strip()
