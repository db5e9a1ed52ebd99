"""The package's imports: no cycle (of modules or of folders), none up the layers, and the
drawing in the docs is the graph as it is. The reading and the layers are scripts/import_graph.py's.
"""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from scripts import import_graph as graph_script

cycles = graph_script.cycles
imports_of = graph_script.imports_of


def test_the_package_has_no_import_cycles() -> None:
    """No group of modules imports each other, directly or through others or their packages."""
    assert [] == cycles(graph_script.import_graph())


def test_no_folder_is_in_a_cycle() -> None:
    """Taken as one node each, the package's folders and top modules import in no circle."""
    assert [] == cycles(graph_script.folder_graph(graph_script.import_graph()))


def test_no_import_goes_up_the_layers() -> None:
    """Every module has a layer, and imports only from its own layer or a lower one."""
    assert [] == graph_script.upward_imports(graph_script.import_graph())


def test_the_drawing_in_the_docs_is_the_graph_as_it_is() -> None:
    """docs/import-graph.inc is what `python scripts/import_graph.py --write` writes now."""
    expected = graph_script.draw(graph_script.import_graph())
    assert expected == graph_script.OUTPUT.read_text(encoding="utf-8")


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


def test_a_dotted_import_counts_its_parent_packages() -> None:
    """Importing ``pkg.sub.deep.leaf`` runs ``pkg/sub`` and ``pkg/sub/deep`` first: both are
    edges, but not the top package, nor a package the importer itself lies in."""
    modules = {"pkg", "pkg.sub", "pkg.sub.deep", "pkg.sub.deep.leaf", "pkg.sub.here"}
    source = "from pkg.sub.deep.leaf import thing\n"
    assert {"pkg.sub.deep", "pkg.sub.deep.leaf"} == imports_of(
        ast.parse(source), "pkg.sub.here", False, modules
    )
    assert {"pkg.sub", "pkg.sub.deep", "pkg.sub.deep.leaf"} == imports_of(
        ast.parse(source), "pkg.other", False, modules | {"pkg.other"}
    )


def test_a_cycle_through_a_package_face_is_found() -> None:
    """A store that imports a feature's submodule runs the feature's ``__init__``, which imports
    the store back: the loop of today's main before the outbox format moved down."""
    sources = {
        "pkg.store": "from pkg.feature._format import X\n",
        "pkg.feature": "from pkg.feature._core import Y\n",
        "pkg.feature._core": "from pkg.store import Z\n",
        "pkg.feature._format": "",
    }
    modules = set(sources) | {"pkg"}
    graph = {
        name: imports_of(ast.parse(text), name, name == "pkg.feature", modules)
        for name, text in sources.items()
    }
    assert [["pkg.feature", "pkg.feature._core", "pkg.store"]] == cycles(graph)


def test_folders_become_one_node() -> None:
    """A folder's modules are one node; an import inside the folder is no edge."""
    graph = {"p.a.x": {"p.a.y", "p.b"}, "p.a.y": set(), "p.b": {"p.a.y"}}
    assert {"p.a": {"p.b"}, "p.b": {"p.a"}} == graph_script.folder_graph(graph)


def test_a_module_in_no_layer_is_refused() -> None:
    """A new top-level module must be given a layer before the check passes."""
    with pytest.raises(LookupError, match="no layer"):
        graph_script.layer_of("idempotent_lambda.brand_new_module")


@pytest.mark.parametrize(
    "store",
    [
        "idempotent_lambda.persistence.in_memory",
        "idempotent_lambda.persistence.dynamodb",
        "idempotent_lambda.persistence.redis",
    ],
)
def test_importing_a_store_loads_no_feature(store: str) -> None:
    """A store is below the outbox, tracing and transactions: importing one loads none of them."""
    code = (
        f"import sys, {store}\n"
        "print(sorted(m for m in sys.modules if m.startswith('idempotent_lambda')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    loaded = ast.literal_eval(result.stdout.strip())
    above = {
        "idempotent_lambda.outbox",
        "idempotent_lambda._tracing",
        "idempotent_lambda.transaction",
    }
    assert [] == [m for m in loaded if m in above or m.startswith("idempotent_lambda.outbox.")]
