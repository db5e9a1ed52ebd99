"""`idempotent-lambda key --handler app:handler` prints the key the handler really stores.

Each test writes a handler module as a user would (a store built at import from the
environment, a decorator with its own settings), runs `key --handler` from its directory, then
invokes the handler on moto's DynamoDB as a cold start would and compares the printed keys with
the ids of the items the invocation stored.
"""

from __future__ import annotations

import importlib
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from idempotent_lambda.cli import main
from idempotent_lambda.testing import (
    api_gateway_http_event,
    kafka_event,
    kinesis_event,
    sqs_event,
)

FUNCTION = "orders-prod"
STORE = """
import functools, os
from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent
from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.adapters.kafka import idempotent_kafka_handler
from idempotent_lambda.adapters.kinesis import idempotent_kinesis_handler
from idempotent_lambda.adapters.sqs import idempotent_sqs_handler

store = DynamoDBPersistenceLayer(os.environ["ORDERS_TABLE"])
"""
APPS: dict[str, tuple[str, Any]] = {
    "idempotent, key expression, native format": (
        """
@idempotent(
    persistence_store=store,
    config=IdempotencyConfig(event_key_jmespath="order_id", record_format="native"),
)
def handler(event, context):
    return {"charged": event["order_id"]}
""",
        {"order_id": "o-1", "amount": 10},
    ),
    "under another decorator, with a key prefix": (
        """
def traced(function):
    @functools.wraps(function)
    def outer(event, context):
        return function(event, context)
    return outer

@traced
@idempotent(
    persistence_store=store,
    config=IdempotencyConfig(event_key_jmespath="order_id", hash_function="sha1"),
    key_prefix="payments",
)
def handler(event, context):
    return "done"
""",
        {"order_id": "o-2"},
    ),
    "sqs, business key, shared scope": (
        """
@idempotent_sqs_handler(
    persistence_store=store,
    config=IdempotencyConfig(event_key_jmespath="powertools_json(body).order_id"),
    source_scope="shared",
)
def handler(record, context):
    return None
""",
        sqs_event(records=[{"body": {"order_id": "o-1"}}, {"body": {"order_id": "o-2"}}]),
    ),
    "kinesis, Powertools' keys of the whole record": (
        """
@idempotent_kinesis_handler(persistence_store=store, source_scope="powertools")
def handler(record, context):
    return None
""",
        kinesis_event(records=[{"data": {"order_id": "o-1"}}, {"data": {"order_id": "o-2"}}]),
    ),
    "http, own header": (
        """
@idempotent_http(persistence_store=store, header_name="X-Request-Id", methods=["POST", "PUT"])
def handler(event, context):
    return {"statusCode": 201, "body": "{}"}
""",
        api_gateway_http_event(headers={"X-Request-Id": "r-1"}, idempotency_key=False),
    ),
    "kafka, business key": (
        """
@idempotent_kafka_handler(
    persistence_store=store,
    config=IdempotencyConfig(
        event_key_jmespath="powertools_json(powertools_base64(value)).order_id"
    ),
)
def handler(record, context):
    return None
""",
        kafka_event(records=[{"value": {"order_id": "o-1"}}, {"value": {"order_id": "o-2"}}]),
    ),
}


@pytest.fixture
def app_dir(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    make_table: Any,
    dynamodb_endpoint: str,
) -> Iterator[Path]:
    """A function's code directory as the current one, its table and endpoint in the env."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_endpoint)
    monkeypatch.setenv("ORDERS_TABLE", make_table())
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith("app_"):
            del sys.modules[name]


def write_app(directory: Path, source: str, event: Any) -> str:
    """Write the handler module and the event; return the module's name."""
    module = f"app_{uuid.uuid4().hex[:8]}"
    (directory / f"{module}.py").write_text(STORE + source, encoding="utf-8")
    (directory / "event.json").write_text(json.dumps(event), encoding="utf-8")
    return module


def key(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[Any], str]:
    code = main(["key", *argv, "--json", "event.json"])
    captured = capsys.readouterr()
    return code, [json.loads(line) for line in captured.out.splitlines()], captured.err


def stored_ids(dynamodb_client: Any) -> list[str]:
    import os

    items = dynamodb_client.scan(TableName=os.environ["ORDERS_TABLE"])["Items"]
    return sorted(item["id"]["S"] for item in items)


@pytest.mark.parametrize("app", APPS)
def test_the_printed_key_is_the_key_the_handler_stores(
    app_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    dynamodb_client: Any,
    app: str,
) -> None:
    """No option but --handler and --function-name: the handler's own settings are used."""
    source, event = APPS[app]
    module = write_app(app_dir, source, event)

    code, lines, err = key(capsys, "--handler", f"{module}:handler", "--function-name", FUNCTION)

    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", FUNCTION)
    monkeypatch.syspath_prepend(str(app_dir))
    sys.modules.pop(module, None)  # a cold start imports the module afresh
    answer = importlib.import_module(module).handler(event, None)
    assert not (isinstance(answer, dict) and answer.get("batchItemFailures"))
    assert (0, stored_ids(dynamodb_client)) == (code, sorted(line["key"] for line in lines))
    assert f"note: hashing with the settings of {module}:handler" in err


def test_an_option_that_disagrees_with_the_handler_is_refused(
    app_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--jmespath or --decorator other than the handler's: exit 2, naming both values."""
    source, event = APPS["sqs, business key, shared scope"]
    module = write_app(app_dir, source, event)
    handler = ["--handler", f"{module}:handler", "--function-name", FUNCTION]

    code, lines, err = key(capsys, *handler, "--jmespath", "messageId")
    assert (2, []) == (code, lines)
    assert "--jmespath 'messageId' disagrees with" in err
    assert "event_key_jmespath 'powertools_json(body).order_id'" in err

    code, lines, err = key(capsys, *handler, "--decorator", "idempotent")
    assert (2, True) == (code, "'idempotent_sqs_handler'" in err)

    agreeing = ["--decorator", "idempotent_sqs_handler", "--source-scope", "shared"]
    code, lines, err = key(capsys, *handler, *agreeing)
    assert (0, 2) == (code, len(lines))


def test_a_handler_that_cannot_be_imported_is_an_error_unless_no_import(
    app_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Import fails (its environment is missing): exit 2 saying why; --no-import says what it
    hashes instead."""
    source, event = APPS["idempotent, key expression, native format"]
    module = write_app(app_dir, source, event)
    monkeypatch.delenv("ORDERS_TABLE")

    code, lines, err = key(capsys, "--handler", f"{module}:handler")
    assert (2, []) == (code, lines)
    assert f"cannot import {module} for --handler (KeyError: 'ORDERS_TABLE')" in err

    code, lines, err = key(capsys, "--handler", f"{module}:handler", "--no-import")
    assert (0, 1) == (code, len(lines))
    assert "note: --no-import: this key uses the options given alone: idempotent, " in err


def test_an_undecorated_handler_is_said_to_use_the_options_alone(
    app_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A function this library did not decorate: the key of the options, and a note saying so."""
    module = write_app(app_dir, "def handler(event, context):\n    return 1\n", {"a": 1})

    code, lines, err = key(capsys, "--handler", f"{module}:handler", "--jmespath", "a")

    assert (0, 1) == (code, len(lines))
    assert f"note: {module}:handler is not decorated by idempotent_lambda" in err
    assert "event_key_jmespath 'a'" in err
