"""Every error a page names can be imported, and every import a page shows works.

The library's errors live in `idempotent_lambda.exceptions` (the Errors reference); the ones a
handler's caller catches are importable from `idempotent_lambda` too. A page that names an error
defined elsewhere (a private module), or shows an import that fails, is caught here, before a
user copies it.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import idempotent_lambda
import idempotent_lambda.exceptions

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "idempotent_lambda"
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
#: `from idempotent_lambda... import A, B` (parenthesised or not), in prose or a code block.
IMPORT = re.compile(r"from (idempotent_lambda[\w.]*) import \(?([\w\s,]+?)\)?(?:`|$|\n\n)", re.M)
#: Errors a caller of a decorated handler catches: importable from the package itself.
CAUGHT_BY_CALLERS = {
    "IdempotencyAlreadyInProgressError",
    "IdempotencyConfigError",
    "IdempotencyError",
    "IdempotencyKeyError",
    "IdempotencyPersistenceLayerError",
    "IdempotencyTransactionConflictError",
    "IdempotencyTransactionError",
    "IdempotencyUnstorableResultError",
    "IdempotencyValidationError",
}


def library_errors() -> dict[str, str]:
    """Return every exception class the package defines (by its source), with its module."""
    found: dict[str, str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Error"):
                found.setdefault(node.name, module)
    return found


def named_errors() -> dict[str, list[str]]:
    """Return each library error any page names, with the pages that name it."""
    errors = library_errors()
    named: dict[str, list[str]] = {}
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for name in sorted(set(re.findall(r"\b[A-Z]\w*Error\b", text)) & set(errors)):
            named.setdefault(name, []).append(page.relative_to(ROOT).as_posix())
    return named


def shown_imports() -> list[tuple[str, str, str]]:
    """Return ``(page, module, name)`` for every import of the package a page shows."""
    shown = []
    for page in PAGES:
        for module, names in IMPORT.findall(page.read_text(encoding="utf-8")):
            for name in re.split(r"[\s,]+", names.strip()):
                if name:
                    shown.append((page.relative_to(ROOT).as_posix(), module, name))
    return shown


def test_the_pages_name_errors_and_show_imports() -> None:
    """The scans below have something to check: they would notice a broken pattern."""
    assert {"IdempotencyTransactionConflictError", "MalformedEventError"} <= set(named_errors())
    assert (
        "docs/production.md",
        "idempotent_lambda.transaction",
        "IdempotencyTransactionConflictError",
    ) in shown_imports()


@pytest.mark.parametrize("name", sorted(named_errors()))
def test_every_error_a_page_names_is_in_the_errors_module(name: str) -> None:
    """An error named on a page is `idempotent_lambda.exceptions`' (where the Errors page is)."""
    assert isinstance(getattr(idempotent_lambda.exceptions, name, None), type), named_errors()[name]


@pytest.mark.parametrize(("page", "module", "name"), shown_imports())
def test_every_import_a_page_shows_works(page: str, module: str, name: str) -> None:
    """`from M import N` as a page writes it: M imports and has N."""
    assert hasattr(importlib.import_module(module), name), f"{page}: from {module} import {name}"


def test_the_errors_callers_catch_come_from_the_package_too() -> None:
    """The package exports them (lazily), as the same classes as the errors module's."""
    for name in sorted(CAUGHT_BY_CALLERS):
        assert name in idempotent_lambda.__all__
        assert getattr(idempotent_lambda, name) is getattr(idempotent_lambda.exceptions, name)


def test_a_transaction_s_errors_come_from_the_transaction_module() -> None:
    """Where `current_transaction` is, so are the errors its commit raises."""
    from idempotent_lambda import transaction

    for name in ("IdempotencyTransactionError", "IdempotencyTransactionConflictError"):
        assert name in transaction.__all__
        assert getattr(transaction, name) is getattr(idempotent_lambda.exceptions, name)
