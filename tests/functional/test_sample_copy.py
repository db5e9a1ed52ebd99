"""The sample stack leaves the repository: a copy of template.yaml and samples/ builds elsewhere.

`make test` names the sam that `make template-check` installed (`SAMPLE_COPY_SAM`), so the
build runs there; elsewhere the test finds `.venv-sam/bin/sam` or a sam on PATH, or skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAM_VARIABLE = "SAMPLE_COPY_SAM"


def installed_sam() -> Path | None:
    """Return the sam to build with: the one make names, else one installed here, else None."""
    named = os.environ.get(SAM_VARIABLE)
    if named:
        return Path(named)
    local = ROOT / ".venv-sam" / "bin" / "sam"
    if local.is_file():
        return local
    found = shutil.which("sam")
    return None if found is None else Path(found)


def test_a_copy_of_the_stack_builds_outside_the_repository() -> None:
    """`sam build` of a copy succeeds; the layer holds the library installed from its wheel."""
    sam = installed_sam()
    if sam is None:
        pytest.skip(
            "sam is not installed: `make template-check` installs it into .venv-sam "
            f"(make test sets {SAM_VARIABLE} and runs this test)"
        )
    assert sam.is_file(), f"{SAM_VARIABLE}={sam} does not exist"
    result = subprocess.run(
        [sys.executable, ROOT / "scripts" / "check_sample_copy.py", "--sam", sam],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert 0 == result.returncode, result.stdout + result.stderr
    assert "Build Succeeded" in result.stdout
    assert "IdempotencyLayer holds idempotent-lambda" in result.stdout


def test_the_layer_is_a_requirement_not_a_copy_of_the_checkout() -> None:
    """The layer's Makefile installs requirements.txt with pip and reads nothing outside it."""
    from scripts.check_sample_copy import source_version

    layer = ROOT / "samples" / "layers" / "idempotent_lambda"
    requirements = [
        line.strip()
        for line in (layer / "requirements.txt").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert [f"idempotent-lambda=={source_version()}"] == requirements
    makefile = (layer / "Makefile").read_text(encoding="utf-8")
    assert '--requirement "$(HERE)requirements.txt"' in makefile
    assert "../" not in makefile
    assert "cp -R" not in makefile


def test_the_layer_build_says_how_to_bring_the_wheel(tmp_path: Path) -> None:
    """Without the package on the index or a wheel folder, the build names PIP_FIND_LINKS."""
    env = {
        **os.environ,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(tmp_path),
        "PIP": f"{sys.executable} -m pip",
    }
    makefile = ROOT / "samples" / "layers" / "idempotent_lambda" / "Makefile"
    result = subprocess.run(
        ["make", "-f", makefile, "build-IdempotencyLayer", f"ARTIFACTS_DIR={tmp_path / 'out'}"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert 0 != result.returncode
    assert "PIP_FIND_LINKS=/tmp/wheels sam build" in result.stderr
