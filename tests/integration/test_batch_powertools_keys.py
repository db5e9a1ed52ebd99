"""From Powertools' BatchProcessor to the batch adapters with the records' keys kept.

Version 1 of an app is Powertools 3.x itself: ``BatchProcessor`` with an
``@idempotent_function(data_keyword_argument="record")`` record handler. Version 2 is the same
module with the record handler under a batch adapter and ``source_scope="powertools"``. Both
run on one table on moto's server: every record version 1 processed replays under version 2,
and the body does not run again.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from idempotent_lambda.testing import (
    FakeLambdaContext,
    dynamodb_stream_event,
    kafka_event,
    kinesis_event,
    sqs_event,
)

#: Version 1: Powertools' own batch and idempotency utilities, as its docs show them.
POWERTOOLS_APP = """
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor, EventType, process_partial_response,
)
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer, IdempotencyConfig, idempotent_function,
)

processor = BatchProcessor(event_type=EventType.{event_type})
persistence_layer = DynamoDBPersistenceLayer(table_name="{table}")
config = IdempotencyConfig(event_key_jmespath={key!r}, payload_validation_jmespath={check!r})
runs = []


@idempotent_function(
    data_keyword_argument="record", persistence_store=persistence_layer, config=config
)
def record_handler(record):
    runs.append(1)
    return {{"done": len(runs)}}


def lambda_handler(event, context):
    config.register_lambda_context(context)
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
"""

#: Version 2: the same module and record handler name, under a batch adapter.
ADAPTER_APP = """
from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig
from idempotent_lambda.adapters.{module} import {decorator}

persistence_layer = DynamoDBPersistenceLayer(table_name="{table}")
config = IdempotencyConfig(event_key_jmespath={key!r}, payload_validation_jmespath={check!r})
runs = []


@{decorator}(persistence_store=persistence_layer, config=config, source_scope="powertools")
def record_handler(record, context):
    runs.append(1)
    return {{"done": len(runs)}}


lambda_handler = record_handler
"""


def _orders(count: int) -> list[dict[str, Any]]:
    return [{"order_id": f"o-{n}", "amount": n} for n in range(count)]


def _sqs(count: int) -> dict[str, Any]:
    return sqs_event(records=[{"body": json.dumps(order)} for order in _orders(count)])


def _stream(count: int) -> dict[str, Any]:
    images = [{"id": order["order_id"], "amount": order["amount"]} for order in _orders(count)]
    return dynamodb_stream_event(records=[{"new_image": image} for image in images])


def _kinesis(count: int) -> dict[str, Any]:
    return kinesis_event(records=[{"data": order} for order in _orders(count)])


def _kafka(count: int) -> dict[str, Any]:
    return kafka_event(records=[{"value": order} for order in _orders(count)])


#: Each source: Powertools' event type, the adapter's module and decorator, the event, and
#: Powertools-style key and validation expressions over the raw record.
SOURCES: dict[str, tuple[str, str, str, Callable[[int], dict[str, Any]], str, str]] = {
    "sqs": ("SQS", "sqs", "idempotent_sqs_handler", _sqs, "messageId", "body"),
    "dynamodb stream": (
        "DynamoDBStreams",
        "dynamodb_stream",
        "idempotent_stream_handler",
        _stream,
        "dynamodb.Keys.id.S",
        "dynamodb.NewImage",
    ),
    "kinesis": (
        "KinesisDataStreams",
        "kinesis",
        "idempotent_kinesis_handler",
        _kinesis,
        "powertools_json(powertools_base64(kinesis.data)).order_id",
        "kinesis.data",
    ),
    "kafka": (
        "Kafka",
        "kafka",
        "idempotent_kafka_handler",
        _kafka,
        "powertools_json(powertools_base64(value)).order_id",
        "value",
    ),
}


class App:
    """Loads a version of the app as the module ``orders_app``, as a deploy replaces it."""

    def __init__(self, directory: Path, table: str) -> None:
        self.path = directory / "orders_app.py"
        self.table = table

    def load(self, template: str, **fields: Any) -> ModuleType:
        self.path.write_text(template.format(table=self.table, **fields), encoding="utf-8")
        spec = importlib.util.spec_from_file_location("orders_app", self.path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["orders_app"] = module
        spec.loader.exec_module(module)
        return module


@pytest.fixture
def app(
    tmp_path: Path,
    make_table: Callable[..., str],
    dynamodb_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[App]:
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_endpoint)
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)  # prefixes say test-func
    yield App(tmp_path, make_table())
    sys.modules.pop("orders_app", None)


def _items(client: Any, table: str) -> list[str]:
    items = client.scan(TableName=table)["Items"]
    return sorted(item["id"]["S"] for item in items)


@pytest.mark.parametrize("whole_record", [False, True], ids=["key expression", "whole record"])
@pytest.mark.parametrize("source", list(SOURCES), ids=list(SOURCES))
def test_records_processed_by_powertools_replay_under_the_adapter(
    app: App,
    source: str,
    whole_record: bool,
    dynamodb_client: Any,
) -> None:
    """Powertools processes a batch; the adapter given the same batch runs no record again."""
    event_type, module, decorator, make_event, key, check = SOURCES[source]
    fields = {
        "event_type": event_type,
        "module": module,
        "decorator": decorator,
        "key": "" if whole_record else key,
        "check": "" if whole_record else check,
    }
    event = make_event(5)

    before = app.load(POWERTOOLS_APP, **fields)
    assert {"batchItemFailures": []} == before.lambda_handler(event, FakeLambdaContext())
    stored = _items(dynamodb_client, app.table)
    after = app.load(ADAPTER_APP, **fields)
    answer = after.lambda_handler(event, FakeLambdaContext())

    assert 5 == len(before.runs)
    assert {"batchItemFailures": []} == answer
    assert [] == after.runs  # every record replayed what Powertools stored
    assert 5 == len(stored)
    assert stored == _items(dynamodb_client, app.table)  # no key of its own


@pytest.mark.parametrize("source", list(SOURCES), ids=list(SOURCES))
def test_a_rollback_to_powertools_replays_what_the_adapter_stored(app: App, source: str) -> None:
    """The adapter processes a batch; Powertools, deployed again, runs none of its records."""
    event_type, module, decorator, make_event, key, check = SOURCES[source]
    fields = {"event_type": event_type, "module": module, "decorator": decorator}
    fields |= {"key": key, "check": check}
    event = make_event(3)

    after = app.load(ADAPTER_APP, **fields)
    assert {"batchItemFailures": []} == after.lambda_handler(event, FakeLambdaContext())
    rolled_back = app.load(POWERTOOLS_APP, **fields)

    assert {"batchItemFailures": []} == rolled_back.lambda_handler(event, FakeLambdaContext())
    assert 3 == len(after.runs)
    assert [] == rolled_back.runs


def test_a_message_redelivered_after_the_switch_replays(app: App, dynamodb_client: Any) -> None:
    """SQS delivers the batch again (receive count 2) to the adapter: nothing runs twice."""
    _, module, decorator, _, key, check = SOURCES["sqs"]
    fields = {"event_type": "SQS", "module": module, "decorator": decorator}
    fields |= {"key": key, "check": check}
    first = _sqs(3)
    again = {
        "Records": [
            {**record, "receiptHandle": "another", "attributes": {"ApproximateReceiveCount": "2"}}
            for record in first["Records"]
        ]
    }

    before = app.load(POWERTOOLS_APP, **fields)
    before.lambda_handler(first, FakeLambdaContext())
    after = app.load(ADAPTER_APP, **fields)

    assert {"batchItemFailures": []} == after.lambda_handler(again, FakeLambdaContext())
    assert [] == after.runs
    assert 3 == len(_items(dynamodb_client, app.table))


def test_a_changed_message_is_refused_as_powertools_refuses_it(app: App) -> None:
    """The validation hash is Powertools' too: a message whose body changed is reported."""
    _, module, decorator, _, key, check = SOURCES["sqs"]
    fields = {"event_type": "SQS", "module": module, "decorator": decorator}
    fields |= {"key": key, "check": check}
    event = _sqs(1)
    changed = {"Records": [{**event["Records"][0], "body": json.dumps({"order_id": "other"})}]}

    app.load(POWERTOOLS_APP, **fields).lambda_handler(event, FakeLambdaContext())
    after = app.load(ADAPTER_APP, **fields)

    message_id = event["Records"][0]["messageId"]
    failed = {"batchItemFailures": [{"itemIdentifier": message_id}]}
    assert failed == after.lambda_handler(changed, FakeLambdaContext())
    assert [] == after.runs


#: Version 1 of another shape: the record handler hands its body to an idempotent function.
POWERTOOLS_BODY_APP = """
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor, EventType, process_partial_response,
)
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer, IdempotencyConfig, idempotent_function,
)

processor = BatchProcessor(event_type=EventType.SQS)
persistence_layer = DynamoDBPersistenceLayer(table_name="{table}")
config = IdempotencyConfig(event_key_jmespath="order_id")
runs = []


@idempotent_function(
    data_keyword_argument="order", persistence_store=persistence_layer, config=config
)
def process(order):
    runs.append(1)
    return {{"done": len(runs)}}


def record_handler(record):
    return process(order=record.json_body)


def lambda_handler(event, context):
    config.register_lambda_context(context)
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
"""

#: Its version 2: an expression over the raw record that finds the same value, and the prefix
#: of the function Powertools decorated.
ADAPTER_BODY_APP = """
from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig
from idempotent_lambda.adapters.sqs import idempotent_sqs_handler

persistence_layer = DynamoDBPersistenceLayer(table_name="{table}")
config = IdempotencyConfig(event_key_jmespath="powertools_json(body).order_id")
runs = []


@idempotent_sqs_handler(
    persistence_store=persistence_layer,
    config=config,
    source_scope="powertools",
    key_prefix="test-func.orders_app.process",
)
def lambda_handler(record, context):
    runs.append(1)
    return {{"done": len(runs)}}
"""


def test_a_payload_taken_from_the_record_keeps_its_key_through_an_expression(
    app: App, dynamodb_client: Any
) -> None:
    """Powertools hashed ``order_id`` of the body; the adapter finds it in the raw record."""
    event = _sqs(3)

    before = app.load(POWERTOOLS_BODY_APP)
    before.lambda_handler(event, FakeLambdaContext())
    after = app.load(ADAPTER_BODY_APP)

    assert {"batchItemFailures": []} == after.lambda_handler(event, FakeLambdaContext())
    assert 3 == len(before.runs)
    assert [] == after.runs
    assert 3 == len(_items(dynamodb_client, app.table))


@pytest.mark.parametrize(("key", "kept"), [("messageId", True), ("", False)])
def test_a_parser_model_keeps_its_keys_through_an_expression_of_a_field_it_keeps(
    app: App, dynamodb_client: Any, key: str, kept: bool
) -> None:
    """``BatchProcessor(model=SqsRecordModel)``: the model's ``messageId`` is the record's, but
    the whole model is not the whole record (docs/migration-checklist.md: wait, then switch)."""
    fields = {"event_type": "SQS", "module": "sqs", "decorator": "idempotent_sqs_handler"}
    fields |= {"key": key, "check": ""}
    modelled = POWERTOOLS_APP.replace(
        "BatchProcessor(event_type=EventType.{event_type})",
        "BatchProcessor(event_type=EventType.{event_type}, model=SqsRecordModel)",
    ).replace(
        "from aws_lambda_powertools.utilities.idempotency import (",
        "from aws_lambda_powertools.utilities.parser.models import SqsRecordModel\n"
        "from aws_lambda_powertools.utilities.idempotency import (",
    )
    event = _sqs(3)

    before = app.load(modelled, **fields)
    before.lambda_handler(event, FakeLambdaContext())
    after = app.load(ADAPTER_APP, **fields)

    assert {"batchItemFailures": []} == after.lambda_handler(event, FakeLambdaContext())
    assert 3 == len(before.runs)
    assert ([] if kept else [1, 1, 1]) == after.runs
    assert (3 if kept else 6) == len(_items(dynamodb_client, app.table))
