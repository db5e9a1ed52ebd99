"""Check the built release artefacts the way a user meets them.

Usage: ``python scripts/check_dist.py DIST_DIR`` after ``python -m build --outdir DIST_DIR``.

- The wheel and the sdist both ship ``LICENSE``, the sdist ``CHANGELOG.md`` too; the wheel's
  metadata carries the version written in ``idempotent_lambda/__init__.py``.
- The wheel installs into a fresh virtual environment (no editable checkout on the path), where
  a decorated handler runs once and replays, and ``idempotent-lambda --version`` answers.

Exits non-zero, naming the failed check, on any problem. ``make package-check`` runs it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tarfile
import tempfile
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Files of the repository's root that the sdist must hold (MANIFEST.in adds the changelog).
SDIST_FILES = ("LICENSE", "README.md", "CHANGELOG.md")

SMOKE = """
from idempotent_lambda import IdempotencyConfig, InMemoryPersistenceLayer, idempotent

runs = []
store = InMemoryPersistenceLayer()


@idempotent(persistence_store=store, config=IdempotencyConfig(event_key_jmespath="order_id"))
def handler(event, context):
    runs.append(event["order_id"])
    return {"order_id": event["order_id"], "status": "created"}


first = handler({"order_id": "o-1"}, None)
again = handler({"order_id": "o-1"}, None)
assert first == again == {"order_id": "o-1", "status": "created"}, (first, again)
assert runs == ["o-1"], runs
print("smoke: the handler ran once and replayed")
"""


def source_version() -> str:
    """Return ``__version__`` as written in the package's ``__init__.py``."""
    tree = ast.parse((ROOT / "idempotent_lambda" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__version__" for target in node.targets
        ):
            return str(ast.literal_eval(node.value))
    raise SystemExit("no __version__ in idempotent_lambda/__init__.py")


def check_artefacts(dist: Path, version: str) -> Path:
    """Check both artefacts carry LICENSE and the version; return the wheel's path."""
    wheels = sorted(dist.glob("idempotent_lambda-*.whl"))
    sdists = sorted(dist.glob("idempotent_lambda-*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise SystemExit(f"expected one wheel and one sdist in {dist}, found {wheels + sdists}")
    wheel, sdist = wheels[0], sdists[0]
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = next(name for name in names if name.endswith(".dist-info/METADATA"))
        text = archive.read(metadata).decode("utf-8")
    if not any(name.endswith(".dist-info/licenses/LICENSE") for name in names):
        raise SystemExit(f"{wheel.name} does not ship LICENSE")
    if f"\nVersion: {version}\n" not in text:
        raise SystemExit(f"{wheel.name} metadata does not say Version: {version}")
    with tarfile.open(sdist) as archive:
        names = set(archive.getnames())
    for shipped in SDIST_FILES:
        if f"idempotent_lambda-{version}/{shipped}" not in names:
            raise SystemExit(f"{sdist.name} does not ship {shipped}")
    print(
        f"artefacts: {wheel.name} ships LICENSE, {sdist.name} {', '.join(SDIST_FILES)}; "
        f"version {version}"
    )
    return wheel


def check_install(wheel: Path, version: str) -> None:
    """Install ``wheel`` into a clean venv; run a decorated handler and the CLI there."""
    with tempfile.TemporaryDirectory() as folder:
        env_dir = Path(folder) / "venv"
        venv.create(env_dir, with_pip=True)
        python = env_dir / "bin" / "python"
        subprocess.run(
            [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel],
            check=True,
        )
        # from a folder outside the checkout, so the installed wheel is what gets imported
        subprocess.run([python, "-I", "-c", SMOKE], check=True, cwd=folder)
        answer = subprocess.run(
            [env_dir / "bin" / "idempotent-lambda", "--version"],
            check=True,
            cwd=folder,
            capture_output=True,
            text=True,
        ).stdout.strip()
        if answer != f"idempotent-lambda {version}":
            raise SystemExit(f"idempotent-lambda --version answered {answer!r}")
        print(f"cli: {answer}")


def main() -> None:
    """Run every check on the artefacts in the folder given on the command line."""
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    version = source_version()
    wheel = check_artefacts(Path(sys.argv[1]), version)
    check_install(wheel.resolve(), version)


if __name__ == "__main__":
    main()
