"""The migration tests import idempotency names only at Powertools' relative paths.

Swapping the prefix back (``idempotent_lambda`` → Powertools') gives imports that exist in
Powertools: so every test here is Powertools code after a literal prefix swap.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

powertools = pytest.importorskip("aws_lambda_powertools.utilities.idempotency")
HERE = Path(__file__).parent
MODULES = sorted(path for path in HERE.glob("test_*.py") if path.name != Path(__file__).name)


def _our_imports(path: Path) -> list[tuple[str, str]]:
    tree = ast.parse(path.read_text())
    imports = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("idempotent_lambda"):
            imports.extend((node.module or "", alias.name) for alias in node.names)
    return imports


@pytest.mark.parametrize("path", MODULES, ids=[path.stem for path in MODULES])
def test_imports_exist_in_powertools(path: Path) -> None:
    """Each ``from idempotent_lambda.X import Y`` is ``from <powertools>.X import Y`` there."""
    imports = _our_imports(path)
    missing = []
    for module, name in imports:
        theirs = powertools.__name__ + module.removeprefix("idempotent_lambda")
        if not hasattr(importlib.import_module(theirs), name):
            missing.append(f"{theirs}.{name}")

    assert imports
    assert [] == missing
