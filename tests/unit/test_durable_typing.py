"""The durable steps' public API under ``mypy --strict``: results and arguments are typed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CASES = Path(__file__).parent / "typing_cases" / "durable_steps.py"


def test_idempotent_step_and_step_are_typed_from_the_function() -> None:
    """``assert_type`` holds, and wrong arguments are errors (their ignores are used)."""
    pytest.importorskip("mypy")
    pytest.importorskip("typing_extensions")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(CASES)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert 0 == result.returncode, result.stdout + result.stderr
