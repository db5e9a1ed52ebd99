"""Read a package's import graph from its source, check its layers, and draw it.

Two packages are read: the library, with `LAYERS`, and the sample, samples/, with
`SAMPLE_LAYERS`. Every function takes the package and its table; the defaults are the library's.

Usage: `python scripts/import_graph.py` prints both drawings; `--write` writes them to
`docs/import-graph.inc`, which docs/architecture.md includes, and `docs/sample-import-graph.inc`,
which docs/sample-app.md includes (tests/unit/test_import_graph.py and
tests/functional/test_sample_imports.py check that the committed files are what this script
draws now).

Every import counts: a lazy one inside a function, one under ``if TYPE_CHECKING:``, and the
parent packages of a dotted one (importing ``a.b.c`` runs ``a/b/__init__.py`` first), except
those the importing module sits in, which have already run. The package's own ``__init__.py``
imports its names on first use and is left out of the parents (the sample's is a docstring). A
package's table of layers is the one place its layers are named: the docs show it, and the tests
check that no import goes from a layer to a later one.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "idempotent_lambda"
OUTPUT = ROOT / "docs" / "import-graph.inc"
SAMPLES = ROOT / "samples"
SAMPLE_OUTPUT = ROOT / "docs" / "sample-import-graph.inc"

#: A table of layers, lowest first: (name, job, modules). A module belongs to the longest entry
#: naming it or a package above it; ``*`` names the package's own face. Imports go only to the
#: same layer or an earlier one.
Layers = tuple[tuple[str, str, tuple[str, ...]], ...]

#: The library's layers.
LAYERS: Layers = (
    (
        "formats",
        "stored formats and the leaves everything reads: errors, record, clock, limits, the "
        "decision seam",
        (
            "exceptions",
            "record",
            "_record_format",
            "_outbox_format",
            "_canonical",
            "_result_codec",
            "_limits",
            "_clock",
            "_grant",
            "_observability",
            "_lambda_context",
            "_durable_context",
        ),
    ),
    (
        "stores",
        "keep records and enforce the conditional writes, one round trip each",
        (
            "persistence",
            "persistence.protocol",
            "persistence._schema",
            "persistence._aws",
            "persistence._powertools_layer",
            "persistence.in_memory",
            "persistence.datarecord",
            "persistence.dynamodb",
            "persistence.redis",
        ),
    ),
    (
        "identity and config",
        "settings validated once; a payload turned into an immutable invocation",
        ("config", "_identity", "serialization", "event_keys"),
    ),
    (
        "engine",
        "the record state machine, its effects and drivers, transactions, spans, metrics",
        ("_engine", "_claim", "_recording", "_effects", "transaction", "_tracing", "metrics"),
    ),
    (
        "entry and adapters",
        "the decorators, the one entry layer and the event-source adapters",
        ("_entry", "_setup", "decorators", "adapters"),
    ),
    (
        "features",
        "built on the adapters and the entry layer: the outbox, durable functions",
        ("outbox", "durable"),
    ),
    (
        "Powertools shims",
        "Powertools' names at Powertools' paths (thin re-exports), and the package's face",
        (
            "*",
            "base",
            "idempotency",
            "hook",
            "persistence.base",
            "persistence.cache",
        ),
    ),
    (
        "tools",
        "the CLI, the test kit, the pytest plugin",
        ("cli", "__main__", "testing", "pytest_plugin"),
    ),
)

#: The sample's layers (samples/__init__.py tells what each part is for). The handlers are at
#: the bottom: `template.yaml` deploys them without the rest, so they import only the library.
SAMPLE_LAYERS: Layers = (
    (
        "app",
        "the Lambda handlers `template.yaml` deploys; they import only the library",
        ("app",),
    ),
    (
        "local stand-ins",
        "what the kit is built on: tables from the template, Lambda-shaped events and stream "
        "reading, the embedded server",
        ("local_stack", "local_lambda", "local_server"),
    ),
    (
        "kit",
        "the app on local tables, and what watches it (decisions, metrics, requests, the "
        "transcript)",
        ("local_app", "watchers"),
    ),
    (
        "steps",
        "the scenario's steps, which the demo and tests/functional run",
        ("scenario", "outbox_steps", "tracing", "answers"),
    ),
    (
        "demo",
        "`python -m samples.demo`, and the package's face",
        ("*", "demo"),
    ),
)

#: What `--write` writes: each package, its table and the file its drawing goes to.
TREES: tuple[tuple[Path, Layers, Path], ...] = (
    (PACKAGE, LAYERS, OUTPUT),
    (SAMPLES, SAMPLE_LAYERS, SAMPLE_OUTPUT),
)


def module_name(path: Path, package: Path = PACKAGE) -> str:
    """Return the dotted name of a module file of ``package``."""
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(tree: ast.Module, name: str, is_package: bool, modules: set[str]) -> set[str]:
    """Return the package modules that the module ``name`` (parsed as ``tree``) imports.

    Parent packages of an imported module count, except the top package and the packages
    ``name`` itself lies in.
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
    own = _parents(name) | {name}
    top = name.partition(".")[0]
    for target in list(found):
        found.update(p for p in _parents(target) if p != top and p not in own)
    return {target for target in found if target in modules and target != name}


def _parents(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:n]) for n in range(1, len(parts))}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Return, for each module of ``package``, the package modules it imports."""
    paths = {module_name(path, package): path for path in package.rglob("*.py")}
    modules = set(paths)
    return {
        name: imports_of(
            ast.parse(path.read_text(encoding="utf-8")), name, path.name == "__init__.py", modules
        )
        for name, path in paths.items()
    }


def folder_of(name: str) -> str:
    """Return the node that stands for module ``name``: its folder under the package, or itself."""
    parts = name.split(".")
    return ".".join(parts[:2])


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Return ``graph`` with each folder under the package made one node."""
    folders: dict[str, set[str]] = {}
    for name, targets in graph.items():
        folders.setdefault(folder_of(name), set()).update(folder_of(t) for t in targets)
    for node, targets in folders.items():
        targets.discard(node)
    return folders


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Return the strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
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


def layer_of(name: str, layers: Layers = LAYERS) -> int:
    """Return the index in ``layers`` of module ``name`` (a dotted name under the package).

    The longest entry that names the module or a package above it decides.

    Raises:
        LookupError: No layer names it.
    """
    short = name.partition(".")[2] or "*"
    matches = [
        (len(member), number)
        for number, (_, _, members) in enumerate(layers)
        for member in members
        if short == member or short.startswith(member + ".")
    ]
    if not matches:
        raise LookupError(f"{name} is in no layer of its table in scripts/import_graph.py")
    return max(matches)[1]


def upward_imports(graph: dict[str, set[str]], layers: Layers = LAYERS) -> list[str]:
    """Return each import that goes from a layer of ``layers`` to a later one, as ``a -> b``."""
    return [
        f"{name} -> {target}"
        for name in sorted(graph)
        for target in sorted(graph[name])
        if layer_of(target, layers) > layer_of(name, layers)
    ]


def _node_id(name: str) -> str:
    return "m_" + (name.partition(".")[2].replace(".", "_") or "top")


def _label(name: str, package: Path) -> str:
    short = name.partition(".")[2]
    if not short:
        return f"{package.name}/__init__"
    return short + ("/" if (package / short).is_dir() else ".py")


#: Close spacing, so that the drawing, shrunk to the column's width, keeps labels a reader can
#: make out.
COMPACT = '%%{init: {"flowchart": {"nodeSpacing": 12, "rankSpacing": 28, "padding": 4}}}%%'


def draw(graph: dict[str, set[str]], package: Path = PACKAGE, layers: Layers = LAYERS) -> str:
    """Return the layer table and the drawing (files as nodes, a folder under ``package`` as
    one node, grouped by layer, the highest first; an import that others already imply left
    out) as Markdown with a mermaid block."""
    folders = folder_graph(graph)
    lines = ["| layer | modules | job |", "| --- | --- | --- |"]
    for name, job, members in reversed(layers):
        face = f"`{package.name}/__init__`"
        shown = ", ".join(face if m == "*" else f"`{m}`" for m in members)
        lines.append(f"| {name} | {shown} | {job} |")
    lines += ["", "```mermaid", COMPACT, "flowchart TB"]
    placed: dict[str, int] = {}
    for name in graph:  # a folder stands in the lowest layer of its modules
        node = folder_of(name)
        placed[node] = min(placed.get(node, len(layers)), layer_of(name, layers))
    for number in reversed(range(len(layers))):
        lines.append(f'  subgraph L{number}["{layers[number][0]}"]')
        lines.extend(
            f'    {_node_id(node)}["{_label(node, package)}"]'
            for node in sorted(folders)
            if placed[node] == number
        )
        lines.append("  end")
    shown_edges = reduced(folders)
    lines.extend(
        f"  {_node_id(node)} --> {_node_id(target)}"
        for node in sorted(shown_edges)
        for target in sorted(shown_edges[node])
    )
    lines.append("```")
    return "\n".join(lines) + "\n"


def reduced(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Return ``graph`` (acyclic) without the edges another path already implies, so the
    drawing stays readable: what reaches what, and so every layer crossing, is unchanged."""

    def reachable(start: str, skipped: str) -> set[str]:
        seen: set[str] = set()
        stack = [t for t in graph.get(start, ()) if t != skipped]
        while stack:
            node = stack.pop()
            if node not in seen:
                seen.add(node)
                stack.extend(graph.get(node, ()))
        return seen

    return {
        node: {t for t in targets if t not in reachable(node, t)} for node, targets in graph.items()
    }


def main(argv: list[str]) -> int:
    """Print the drawings of `TREES`, or write each to its file with ``--write``."""
    for package, layers, output in TREES:
        text = draw(import_graph(package), package, layers)
        if argv[1:] == ["--write"]:
            output.write_text(text, encoding="utf-8")
        else:
            sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
