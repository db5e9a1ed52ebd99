"""The batch decorators share one option list (`BatchOptions`) and keep a full typed signature."""

from __future__ import annotations

import ast
import inspect
import pydoc
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from idempotent_lambda import InMemoryPersistenceLayer
from idempotent_lambda.adapters.dynamodb_stream import idempotent_stream_handler
from idempotent_lambda.adapters.kafka import idempotent_kafka_handler
from idempotent_lambda.adapters.kinesis import idempotent_kinesis_handler
from idempotent_lambda.adapters.sqs import (
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_TIME_SAFETY_MARGIN_MS,
    BatchOptions,
    idempotent_sqs_handler,
)

DECORATORS = [
    idempotent_sqs_handler,
    idempotent_stream_handler,
    idempotent_kinesis_handler,
    idempotent_kafka_handler,
]


def test_the_option_list_is_the_one_documented() -> None:
    """One list, six names: what each decorator accepts."""
    expected = {
        "persistence_store",
        "config",
        "key_prefix",
        "max_concurrency",
        "time_safety_margin_ms",
        "source_scope",
    }
    assert expected == set(BatchOptions.__annotations__)


@pytest.mark.parametrize("decorator", DECORATORS, ids=lambda d: d.__name__)
def test_an_unknown_or_missing_option_is_a_type_error(decorator: object) -> None:
    """As for a function with keyword parameters: a misspelt option, or no store, is refused."""
    store = InMemoryPersistenceLayer()
    with pytest.raises(TypeError, match="max_concurency"):
        decorator(persistence_store=store, max_concurency=4)  # type: ignore[operator]
    with pytest.raises(TypeError, match="persistence_store"):
        decorator(max_concurrency=4)  # type: ignore[operator]


def test_type_checkers_see_every_option(tmp_path: Path) -> None:
    """mypy --strict reads the names and types through ``Unpack[BatchOptions]``.

    The shared names the adapter modules re-export import without an error, too.
    """
    pytest.importorskip("mypy")
    probe = tmp_path / "probe.py"
    probe.write_text(
        textwrap.dedent(
            """
            from idempotent_lambda import InMemoryPersistenceLayer
            from idempotent_lambda.adapters.dynamodb_stream import idempotent_stream_handler
            from idempotent_lambda.adapters.kafka import idempotent_kafka_handler
            from idempotent_lambda.adapters.kinesis import idempotent_kinesis_handler
            from idempotent_lambda.adapters.sqs import idempotent_sqs_handler

            store = InMemoryPersistenceLayer()
            idempotent_kafka_handler(persistence_store=store, max_concurrency=8, key_prefix="k")
            idempotent_sqs_handler(persistence_store=store, max_concurrency="8")
            idempotent_kinesis_handler(persistence_store=store, max_concurency=8)
            idempotent_stream_handler(key_prefix="orders")
            from idempotent_lambda.adapters.sqs import DEFAULT_MAX_CONCURRENCY, BatchItemFailure
            from idempotent_lambda.adapters.sqs import MalformedEventError, MalformedRecordError
            from idempotent_lambda.adapters.kinesis import BatchOptions, PartialBatchResponse
            from idempotent_lambda.adapters.dynamodb_stream import DEFAULT_TIME_SAFETY_MARGIN_MS
            """
        ),
        encoding="utf-8",
    )
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(probe)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert [10, 11, 12] == [int(line.split(":")[1]) for line in errors], result.stdout
    assert '"max_concurrency"' in errors[0]
    assert '"max_concurency"' in errors[1]
    assert '"persistence_store"' in errors[2]


#: Each option with the default it has when omitted (``persistence_store`` has none).
DEFAULTS = {
    "persistence_store": inspect.Parameter.empty,
    "config": None,
    "key_prefix": None,
    "max_concurrency": DEFAULT_MAX_CONCURRENCY,
    "time_safety_margin_ms": DEFAULT_TIME_SAFETY_MARGIN_MS,
    "source_scope": "source",
}


@pytest.mark.parametrize("decorator", DECORATORS, ids=lambda d: d.__name__)
def test_help_shows_each_option_with_its_default(decorator: Callable[..., object]) -> None:
    """`help()` lists the keyword options and their defaults, not ``**options``."""
    parameters = inspect.signature(decorator).parameters
    assert DEFAULTS == {name: parameter.default for name, parameter in parameters.items()}
    assert {inspect.Parameter.KEYWORD_ONLY} == {p.kind for p in parameters.values()}
    shown = pydoc.render_doc(decorator, renderer=pydoc.plaintext)
    # Annotations print quoted (postponed evaluation) or not, depending on the Python.
    assert re.search(rf"max_concurrency: '?int'? = {DEFAULT_MAX_CONCURRENCY}\b", shown)
    assert re.search(r"source_scope: '?str'? = 'source'", shown)
    assert "**options" not in shown


@pytest.mark.parametrize("decorator", DECORATORS, ids=lambda d: d.__name__)
def test_the_reference_reads_each_option_and_its_default(decorator: Callable[..., object]) -> None:
    """The docs' reference reads the source, as here: each option and its default are in it."""
    source = Path(inspect.getfile(inspect.unwrap(decorator))).read_text(encoding="utf-8")
    (function,) = (
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef) and node.name == decorator.__name__
    )
    assert function.args.kwarg is None
    declared = dict.fromkeys(arg.arg for arg in function.args.kwonlyargs)
    assert list(DEFAULTS) == list(declared)
    defaults = [ast.unparse(d) if d else None for d in function.args.kw_defaults]
    expected = [
        None,
        "None",
        "None",
        "DEFAULT_MAX_CONCURRENCY",
        "DEFAULT_TIME_SAFETY_MARGIN_MS",
        "'source'",
    ]
    assert expected == defaults


def test_the_reference_shows_the_value_of_each_default_the_signatures_name() -> None:
    """The signatures name two constants as defaults; the reference renders their values."""
    page = (Path(__file__).resolve().parents[2] / "docs/reference/adapters.md").read_text()
    for name in ("DEFAULT_MAX_CONCURRENCY", "DEFAULT_TIME_SAFETY_MARGIN_MS"):
        assert f"::: idempotent_lambda.adapters.sqs.{name}\n" in page
