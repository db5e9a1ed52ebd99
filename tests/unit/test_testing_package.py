"""`idempotent_lambda.testing`: a package, a pinned surface, a fresh-import fixture."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from idempotent_lambda import testing


def test_testing_all_is_pinned() -> None:
    """The kit's public names are exactly these, sorted."""
    assert [
        "FakeLambdaContext",
        "KafkaRecordFields",
        "KinesisRecordFields",
        "ManualClock",
        "RuleQueue",
        "SQSMessageFields",
        "StreamRecordFields",
        "TableStream",
        "api_gateway_http_event",
        "api_gateway_rest_event",
        "create_idempotency_table",
        "dynamodb_stream_event",
        "kafka_event",
        "kinesis_event",
        "lambda_stream_record",
        "local_dynamodb",
        "serialise_moto_writes",
        "sqs_event",
    ] == testing.__all__
    assert all(hasattr(testing, name) for name in testing.__all__)


def test_the_builders_are_modules_of_the_package() -> None:
    """The event builders live inside the package, not at the library's root."""
    assert testing.__file__ is not None
    assert "idempotent_lambda.testing._events" == testing.sqs_event.__module__
    assert "idempotent_lambda.testing._http_events" == testing.api_gateway_http_event.__module__
    assert "idempotent_lambda.testing._kinesis_kafka_events" == testing.kafka_event.__module__
    root = Path(testing.__file__).parents[1]
    assert [] == sorted(p.name for p in root.glob("_test_*.py"))


@pytest.fixture
def handler_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on `sys.path` holding a module that counts its imports in the environment."""
    (tmp_path / "counted_handler.py").write_text("import os\nSTORE = os.environ['TABLE']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_import_handler_imports_afresh(
    handler_dir: Path,
    import_handler: Callable[[str], ModuleType],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each call builds the module again from the environment of the moment."""
    monkeypatch.setenv("TABLE", "first")
    first = import_handler("counted_handler")
    monkeypatch.setenv("TABLE", "second")
    second = import_handler("counted_handler")

    assert ("first", "second") == (first.STORE, second.STORE)
    assert first is not second


def test_import_handler_leaves_a_module_behind_for_the_next_test(
    handler_dir: Path,
    import_handler: Callable[[str], ModuleType],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Imports `counted_handler`; the test after this one sees it gone (tests run in order)."""
    monkeypatch.setenv("TABLE", "left")
    assert "left" == import_handler("counted_handler").STORE
    assert "counted_handler" in sys.modules


def test_import_handler_forgot_the_module_after_the_test() -> None:
    """`sys.modules` holds again what it held before the previous test."""
    assert "counted_handler" not in sys.modules
