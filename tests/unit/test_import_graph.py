"""The package has no import cycles: read from the source, every import counted."""

from __future__ import annotations

import ast
from pathlib import Path

import idempotent_lambda

PACKAGE = Path(idempotent_lambda.__file__).parent
#: Cycles that another branch removes; delete each entry once that branch is merged.


def module_name(path: Path) -> str:
    """Return the dotted name of a module file of the package."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(tree: ast.Module, name: str, is_package: bool, modules: set[str]) -> set[str]:
    """Return the package modules that the module ``name`` (parsed as ``tree``) imports.

    Every import counts: a lazy one inside a function, and one under ``if TYPE_CHECKING:``
    (two modules that need each other's names are one tangle, whenever the names are read).
    """
    base = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                anchor = base.rsplit(".", node.level - 1)[0] if node.level > 1 else base
                source = f"{anchor}.{source}" if source else anchor
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.add(submodule if submodule in modules else source)
    return {target for target in found if target in modules and target != name}


def import_graph() -> dict[str, set[str]]:
    """Return, for each module of the package, the package modules it imports."""
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    modules = set(paths)
    return {
        name: imports_of(
            ast.parse(path.read_text(encoding="utf-8")), name, path.name == "__init__.py", modules
        )
        for name, path in paths.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Return the strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_the_package_has_no_import_cycles() -> None:
    """No group of modules imports each other, directly or through others."""
    assert [] == cycles(import_graph())


def test_the_check_finds_a_cycle() -> None:
    """The cycle finder reports a two-module and a three-module loop, and nothing else."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert [["a", "b"], ["c", "d", "e"]] == sorted(cycles(graph))


def test_every_import_counts() -> None:
    """Imports inside a function, under ``if TYPE_CHECKING:`` and relative ones are edges."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg import typed\n"
        "def f():\n    from pkg.lazy import thing\n"
        "from . import sibling\n"
        "import json\n"
    )
    modules = {"pkg", "pkg.typed", "pkg.lazy", "pkg.sibling", "pkg.here"}
    expected = {"pkg.typed", "pkg.lazy", "pkg.sibling"}
    assert expected == imports_of(ast.parse(source), "pkg.here", False, modules)
