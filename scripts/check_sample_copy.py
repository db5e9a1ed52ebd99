"""Build the sample stack the way a user who copied it does: outside this repository.

Usage: `python scripts/check_sample_copy.py [--sam PATH] [--wheels DIR] [--keep]`

Copies `template.yaml` and `samples/` into an empty folder, builds the checkout's wheel
(unless `--wheels` names a folder that holds one) and runs `sam build` there with
`PIP_FIND_LINKS` pointing at it, as docs/sample-app.md tells a user to before the package is
on the index. Then checks that `IdempotencyLayer` holds the library installed as a
requirement (its `dist-info`), at the checkout's version.

Exits non-zero, printing sam's output, when the build or a check fails. `make template-check`
and tests/functional/test_sample_copy.py run it.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def source_version() -> str:
    """Return `__version__` as written in the package's `__init__.py`."""
    return _version_in(ROOT / "idempotent_lambda" / "__init__.py")


def _version_in(init: Path) -> str:
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__version__" for target in node.targets
        ):
            return str(ast.literal_eval(node.value))
    raise SystemExit(f"no __version__ in {init}")


def copy_stack(folder: Path) -> None:
    """Copy the template and the samples (no caches) into `folder`."""
    shutil.copy2(ROOT / "template.yaml", folder / "template.yaml")
    shutil.copytree(
        ROOT / "samples", folder / "samples", ignore=shutil.ignore_patterns("__pycache__")
    )


def build_wheel(work: Path) -> Path:
    """Build the checkout's wheel into `work/wheels`; return that folder.

    From a copy of the files the wheel is made of, so no build output lands in the checkout.
    """
    source, wheels = work / "source", work / "wheels"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "idempotent_lambda",
        source / "idempotent_lambda",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir"]
    subprocess.run([*pip_wheel, wheels, source], check=True)
    return wheels


def sam_build(sam: Path, folder: Path, wheels: Path) -> subprocess.CompletedProcess[str]:
    """Run `sam build` in `folder`, pip finding the library in `wheels`."""
    find_links = " ".join(filter(None, [str(wheels), os.environ.get("PIP_FIND_LINKS")]))
    env = {
        **os.environ,
        "PIP_FIND_LINKS": find_links,
        "SAM_CLI_TELEMETRY": "0",
        "AWS_EC2_METADATA_DISABLED": "true",
        # the layers' Makefiles run `python3 -m pip`: sam's own Python, as `make template-check`
        "PATH": f"{sam.parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    return subprocess.run(
        [sam, "build", "--region", "us-east-1"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def check_layer(folder: Path, version: str) -> str:
    """Check the built layer holds the installed library at `version`; describe it."""
    site = folder / ".aws-sam" / "build" / "IdempotencyLayer" / "python"
    init = site / "idempotent_lambda" / "__init__.py"
    if not init.is_file():
        raise SystemExit(f"IdempotencyLayer has no idempotent_lambda package ({site})")
    if not (site / f"idempotent_lambda-{version}.dist-info").is_dir():
        raise SystemExit(f"IdempotencyLayer holds no pip-installed idempotent-lambda {version}")
    built = _version_in(init)
    if built != version:
        raise SystemExit(f"IdempotencyLayer holds idempotent_lambda {built}, expected {version}")
    return f"IdempotencyLayer holds idempotent-lambda {version}, installed by pip"


def main(argv: list[str] | None = None) -> int:
    """Copy, build, check; print what was verified."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sam", type=Path, help="the sam executable (default: sam on PATH)")
    parser.add_argument("--wheels", type=Path, help="a folder with the library's wheel")
    parser.add_argument("--keep", action="store_true", help="keep the folder, print its path")
    args = parser.parse_args(argv)
    sam = args.sam or shutil.which("sam")
    if sam is None:
        parser.error("no sam on PATH: pass --sam")
    work = Path(tempfile.mkdtemp(prefix="sample-copy-"))
    folder = work / "stack"
    try:
        folder.mkdir()
        copy_stack(folder)
        wheels = args.wheels.resolve() if args.wheels else build_wheel(work)
        print(f"copied template.yaml and samples/ into {folder}; wheels from {wheels}")
        result = sam_build(Path(sam).absolute(), folder, wheels)
        if result.returncode != 0:
            print(result.stdout, result.stderr, sep="\n")
            print(f"sam build in {folder}: FAILED")
            return 1
        print(f"sam build in {folder}: Build Succeeded; {check_layer(folder, source_version())}")
        return 0
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
