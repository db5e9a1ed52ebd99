"""The sample has no import cycles: read from the source, every import counted."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.unit.test_import_graph import cycles

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def module_name(path: Path) -> str:
    """Return the dotted name of a module file under samples/."""
    parts = path.relative_to(SAMPLES.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(tree: ast.Module, name: str, is_package: bool, modules: set[str]) -> set[str]:
    """Return the sample modules that the module ``name`` (parsed as ``tree``) imports.

    Every import counts, a lazy one inside a function too, and so does every package above an
    imported module (Python runs its ``__init__.py`` first) unless it is one of ``name``'s own.
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
            found.update(f"{source}.{alias.name}" for alias in node.names)
            found.add(source)
    own = {name.rsplit(".", depth)[0] for depth in range(name.count(".") + 1)}
    parents = {target.rsplit(".", depth)[0] for target in found for depth in range(1, 4)}
    return {target for target in found | parents if target in modules and target not in own}


def import_graph() -> dict[str, set[str]]:
    """Return, for each module under samples/, the sample modules it imports."""
    paths = {module_name(path): path for path in SAMPLES.rglob("*.py")}
    modules = set(paths)
    return {
        name: imports_of(
            ast.parse(path.read_text(encoding="utf-8")), name, path.name == "__init__.py", modules
        )
        for name, path in paths.items()
    }


def test_the_sample_has_no_import_cycles() -> None:
    """No group of sample modules imports each other, directly or through others."""
    assert [] == cycles(import_graph())


def test_the_steps_use_the_kit_and_not_the_reverse() -> None:
    """The scenario imports the kit (`samples.local_app`); nothing the kit imports is a step."""
    graph = import_graph()
    assert "samples.local_app" in graph["samples.scenario"]
    steps = {"samples.scenario", "samples.outbox_steps", "samples.tracing", "samples.answers"}
    assert set() == graph["samples.local_app"] & steps


def test_lazy_relative_and_parent_imports_count() -> None:
    """An import inside a function, a relative one and the package above an import are edges."""
    source = "def f():\n    from samples.app import aws\nfrom . import local_app\n"
    modules = {"samples", "samples.app", "samples.app.aws", "samples.local_app", "samples.x"}
    expected = {"samples.app", "samples.app.aws", "samples.local_app"}
    assert expected == imports_of(ast.parse(source), "samples.x", False, modules)
