"""One description per batch source: the registry, the CLI's list and its dry run agree."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import pytest

from idempotent_lambda import IdempotencyConfig
from idempotent_lambda.adapters._batch_source import BATCH_SOURCES, BatchSource
from idempotent_lambda.cli._dry_run import ADAPTERS, DryRun
from idempotent_lambda.testing import dynamodb_stream_event, kafka_event, kinesis_event, sqs_event

#: A two-record event of each source, as the testing kit builds it.
EVENTS: dict[str, Callable[..., dict[str, Any]]] = {
    "sqs": sqs_event,
    "dynamodb_stream": dynamodb_stream_event,
    "kinesis": kinesis_event,
    "kafka": kafka_event,
}


def _source(module: str) -> BatchSource[Any]:
    found: BatchSource[Any] = importlib.import_module(f"idempotent_lambda.adapters.{module}").SOURCE
    return found


@pytest.mark.parametrize("module", BATCH_SOURCES)
def test_each_registered_source_names_its_public_decorator(module: str) -> None:
    """The decorator a source names is the one its module exports."""
    source = _source(module)
    found = importlib.import_module(f"idempotent_lambda.adapters.{module}")
    assert source.decorator in found.__all__
    assert source.decorator == getattr(found, source.decorator).__name__


def test_the_cli_lists_every_registered_source_and_no_other_batch_adapter() -> None:
    """`key --decorator` offers the registry's sources, each with what its module declares."""
    batch = {name: adapter.batch for name, adapter in ADAPTERS.items() if adapter.batch}
    expected = {_source(module).decorator: _source(module) for module in BATCH_SOURCES}
    assert expected == batch
    assert set(EVENTS) == set(BATCH_SOURCES)  # a new source needs an event here too


@pytest.mark.parametrize("module", BATCH_SOURCES)
def test_the_dry_run_cuts_each_sources_event_as_the_source_declares(module: str) -> None:
    """Each record of a source's event gets a key of its own, and a non-batch event a clear no."""
    source = _source(module)
    run = DryRun(
        source.decorator,
        config=IdempotencyConfig(),
        key_prefix="p",
        handler=None,
        function_name=None,
        options={},
    )
    derived = run.derive(EVENTS[module](records=[{}, {}]))
    keys = [found.key for found in derived]
    assert 2 == len(set(keys))
    assert None not in keys
    assert [] == source.one_by_one({"id": 1})
