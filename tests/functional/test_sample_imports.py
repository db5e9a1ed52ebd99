"""The sample's imports: no cycle (of modules or of folders), none up `SAMPLE_LAYERS`, and the
drawing in docs/sample-app.md is the graph as it is. The reading and the layers are
scripts/import_graph.py's.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from scripts import import_graph as graph_script

SAMPLES = graph_script.SAMPLES
SAMPLE_LAYERS = graph_script.SAMPLE_LAYERS


def test_the_sample_has_no_import_cycles() -> None:
    """No group of sample modules imports each other, directly or through others."""
    assert [] == graph_script.cycles(graph_script.import_graph(SAMPLES))


def test_no_sample_folder_is_in_a_cycle() -> None:
    """Taken as one node each, samples/app/ and the top modules import in no circle."""
    assert [] == graph_script.cycles(graph_script.folder_graph(graph_script.import_graph(SAMPLES)))


def test_every_sample_module_is_in_a_layer() -> None:
    """A new sample module must be given a layer in `SAMPLE_LAYERS` before the check passes."""
    unplaced = []
    for name in sorted(graph_script.import_graph(SAMPLES)):
        try:
            graph_script.layer_of(name, SAMPLE_LAYERS)
        except LookupError:
            unplaced.append(name)
    assert [] == unplaced


def test_no_sample_import_goes_up_the_layers() -> None:
    """Every sample module imports only from its own layer or a lower one."""
    assert [] == graph_script.upward_imports(graph_script.import_graph(SAMPLES), SAMPLE_LAYERS)


def test_the_sample_drawing_in_the_docs_is_the_graph_as_it_is() -> None:
    """docs/sample-import-graph.inc is what `python scripts/import_graph.py --write` writes now."""
    expected = graph_script.draw(graph_script.import_graph(SAMPLES), SAMPLES, SAMPLE_LAYERS)
    assert expected == graph_script.SAMPLE_OUTPUT.read_text(encoding="utf-8")


def test_a_reversed_import_is_found(tmp_path: Path) -> None:
    """In a copy of samples/ whose kit imports a step lazily, the check names that import."""
    copy = tmp_path / "samples"
    shutil.copytree(SAMPLES, copy)
    reversed_import = "\n\ndef _reversed() -> None:\n    from samples import scenario\n"
    kit = copy / "local_app.py"
    kit.write_text(kit.read_text(encoding="utf-8") + reversed_import, encoding="utf-8")
    graph = graph_script.import_graph(copy)
    assert ["samples.local_app -> samples.scenario"] == graph_script.upward_imports(
        graph, SAMPLE_LAYERS
    )
    assert [] != graph_script.cycles(graph)


def test_the_steps_use_the_kit_and_not_the_reverse() -> None:
    """The scenario imports the kit (`samples.local_app`); nothing the kit imports is a step."""
    graph = graph_script.import_graph(SAMPLES)
    assert "samples.local_app" in graph["samples.scenario"]
    steps = {"samples.scenario", "samples.outbox_steps", "samples.tracing", "samples.answers"}
    assert set() == graph["samples.local_app"] & steps


def test_lazy_relative_and_parent_imports_count() -> None:
    """An import inside a function, a relative one and the package above an import are edges."""
    source = "def f():\n    from samples.app import aws\nfrom . import local_app\n"
    modules = {"samples", "samples.app", "samples.app.aws", "samples.local_app", "samples.x"}
    expected = {"samples.app", "samples.app.aws", "samples.local_app"}
    assert expected == graph_script.imports_of(ast.parse(source), "samples.x", False, modules)
