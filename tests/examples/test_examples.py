"""Every example under examples/ runs, and the docs show no Python that is not one of them.

The examples are written as a user would write them (a store on ``"IdempotencyTable"``, no
endpoint), so each test points boto3 at a moto server holding the tables and bucket they
name (through ``AWS_ENDPOINT_URL_*`` and dummy credentials), imports the example afresh and runs
its handler. The Redis example runs against the real ``redis-server`` of
tests/integration/_redis_server.py (skipped, with the reason, when it is not installed). The
docs include the examples as snippets (``--8<-- "examples/..."``); the checks at the end hold
every fenced Python block of the docs to that, and the README's one example to
``examples/getting_started/first_handler.py``.
"""

from __future__ import annotations

import contextvars
import importlib.util
import inspect
import json
import logging
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest.mock import ANY

import boto3
import pytest
import yaml

from idempotent_lambda import IdempotencyValidationError
from idempotent_lambda.exceptions import IdempotencyTransactionConflictError
from idempotent_lambda.testing import (
    FakeLambdaContext,
    KafkaRecordFields,
    KinesisRecordFields,
    create_idempotency_table,
    kafka_event,
    kinesis_event,
)
from idempotent_lambda.testing import sqs_event as sqs_batch
from tests.examples._recipes import RECIPES
from tests.examples._step_functions import run_reserve_stock
from tests.examples._tracing import run_otlp_exporter

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BUCKET = "my-idempotency-results"


@pytest.fixture(scope="session")
def examples_endpoint() -> Iterator[str]:
    """Yield the URL of a moto server holding the examples' tables and bucket."""
    from idempotent_lambda.testing import local_dynamodb

    with local_dynamodb() as endpoint:
        options = {
            "endpoint_url": endpoint,
            "region_name": "us-east-1",
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
        }
        client = boto3.client("dynamodb", **options)
        create_idempotency_table(client, table_name="IdempotencyTable", outbox=True)
        for table, key in (("orders", "order_id"), ("stock", "sku"), ("order_views", "order_id")):
            client.create_table(
                TableName=table,
                BillingMode="PAY_PER_REQUEST",
                AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
                KeySchema=[{"AttributeName": key, "KeyType": "HASH"}],
            )
        boto3.client("s3", **options).create_bucket(Bucket=BUCKET)
        yield endpoint


@pytest.fixture
def aws(examples_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """Point boto3 at the examples' server with dummy credentials; return its URL."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_CONFIG_FILE": str(tmp_path / "aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "aws-credentials"),
        "AWS_ENDPOINT_URL_DYNAMODB": examples_endpoint,
        "AWS_ENDPOINT_URL_S3": examples_endpoint,
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    return examples_endpoint


def load_example(relative: str) -> ModuleType:
    """Import ``examples/<relative>`` as a new module (a fresh store, a fresh key prefix)."""
    path = EXAMPLES / relative
    name = "example_" + uuid.uuid4().hex[:8] + "_" + path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ROOT = EXAMPLES.parent
DOCS = ROOT / "docs"
SNIPPET = re.compile(r'^--8<-- "(?P<path>[^":]+)(?::(?P<section>[\w-]+))?"$')


def event_id() -> str:
    return uuid.uuid4().hex


class Calls:
    """A thread-safe recorder standing in for an example's side effect."""

    def __init__(self, result: Any = None) -> None:
        self.args: list[tuple[Any, ...]] = []
        self._result = result
        self._lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        with self._lock:
            self.args.append(args)
        return self._result(*args) if callable(self._result) else self._result


# ------------------------------------------------------------------------------ getting started
def run_first_handler(module: ModuleType) -> None:
    module.charge = Calls(lambda payment_id, amount: f"ch_{payment_id}")
    payment_id = event_id()
    event = {"body": json.dumps({"payment_id": payment_id, "amount": "25.00"})}
    first = module.handler(event, FakeLambdaContext())
    assert {"statusCode": 201, "body": json.dumps({"charge_id": f"ch_{payment_id}"})} == first
    assert first == module.handler(event, FakeLambdaContext())
    assert [(payment_id, "25.00")] == module.charge.args
    changed = {"body": json.dumps({"payment_id": payment_id, "amount": "99.00"})}
    with pytest.raises(IdempotencyValidationError):
        module.handler(changed, FakeLambdaContext())
    assert 1 == len(module.charge.args)


def run_any_function(module: ModuleType) -> None:
    module.send_email = Calls(lambda address, order_id: f"msg_{order_id}")
    order = {"order_id": event_id(), "email": "ana@example.com"}
    other = {"order_id": event_id(), "email": "bo@example.com"}
    results = module.handler({"orders": [order, other, order]}, FakeLambdaContext())
    assert results[0] == results[2] == {"order_id": order["order_id"], "message_id": ANY}
    assert 2 == len(module.send_email.args)


# ------------------------------------------------------------------------------------ batches
def sqs_event(*bodies: dict[str, Any]) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": event_id(),
                "body": json.dumps(body),
                "attributes": {"ApproximateReceiveCount": "1"},
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:payments",
            }
            for body in bodies
        ]
    }


def run_process_payments(module: ModuleType) -> None:
    module.capture = Calls(lambda payment_id, amount: f"rcpt_{payment_id}")
    first, second = event_id(), event_id()
    event = sqs_event(
        {"payment_id": first, "amount": "10.00"},
        {"payment_id": second, "amount": "5.00"},
        {"payment_id": first, "amount": "10.00"},  # a producer's duplicate: new message id
    )
    assert {"batchItemFailures": []} == module.handler(event, FakeLambdaContext())
    assert {"batchItemFailures": []} == module.handler(event, FakeLambdaContext())  # redelivered
    # Once per payment; the two payments run on parallel lanes, so in either order.
    assert sorted([(first, "10.00"), (second, "5.00")]) == sorted(module.capture.args)


def run_concurrent_batch(module: ModuleType) -> None:
    module.notify = Calls()
    event = sqs_event(*({"n": n} for n in range(20)))
    assert {"batchItemFailures": []} == module.handler(event, FakeLambdaContext())
    assert {"batchItemFailures": []} == module.handler(event, FakeLambdaContext())
    assert sorted(json.dumps({"n": n}) for n in range(20)) == sorted(
        body for (body,) in module.notify.args
    )


def stream_record(name: str, sequence: str, *, ttl: bool = False) -> dict[str, Any]:
    record: dict[str, Any] = {
        "eventID": event_id(),
        "eventName": name,
        "eventSource": "aws:dynamodb",
        "eventSourceARN": (
            "arn:aws:dynamodb:us-east-1:123456789012:table/users/stream/2026-01-01T00:00:00.000"
        ),
        "dynamodb": {
            "Keys": {"user_id": {"S": "u-1"}},
            "NewImage": {"user_id": {"S": "u-1"}, "email": {"S": "ana@example.com"}},
            "SequenceNumber": sequence,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        },
    }
    if ttl:
        record["userIdentity"] = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
    return record


def run_send_welcome(module: ModuleType) -> None:
    module.send_welcome = Calls()
    base = int(uuid.uuid4().int % 10**12)
    event = {
        "Records": [
            stream_record("INSERT", str(base)),
            stream_record("MODIFY", str(base + 1)),
            stream_record("REMOVE", str(base + 2), ttl=True),
        ]
    }
    assert {"batchItemFailures": []} == module.handler(event, FakeLambdaContext())
    assert {"batchItemFailures": []} == module.handler(event, FakeLambdaContext())  # re-read
    assert [("ana@example.com",)] == module.send_welcome.args


def run_count_clicks(module: ModuleType) -> None:
    module.add_click = Calls()
    users = [f"user-{event_id()}" for _ in range(2)]
    fields = [
        KinesisRecordFields(partition_key=users[n % 2], data={"page": f"/p{n}"}) for n in range(6)
    ]
    event = kinesis_event(records=fields)
    assert {"batchItemFailures": []} == module.handler(event, FakeLambdaContext())
    assert {"batchItemFailures": []} == module.handler(event, FakeLambdaContext())  # resent
    for n, user in enumerate(users):  # once each, and in order per user
        assert [(user, f"/p{p}") for p in range(n, 6, 2)] == [
            args for args in module.add_click.args if args[0] == user
        ]


def run_ship_orders(module: ModuleType) -> None:
    module.ship = Calls(lambda order_id, address: f"shp_{order_id}")
    first, second = event_id(), event_id()
    orders = [(0, first), (1, second), (1, first)]  # a producer's duplicate, on partition 1
    fields = [
        KafkaRecordFields(partition=p, value={"order_id": o, "address": "1 Main St"})
        for p, o in orders
    ]
    event = kafka_event(records=fields)
    assert {"batchItemFailures": []} == module.handler(event, FakeLambdaContext())
    assert {"batchItemFailures": []} == module.handler(event, FakeLambdaContext())  # resent
    assert sorted([(first, "1 Main St"), (second, "1 Main St")]) == sorted(module.ship.args)


def s3_notification(key: str, sequencer: str) -> dict[str, Any]:
    return {
        "Records": [
            {
                "eventVersion": "2.1",
                "eventSource": "aws:s3",
                "eventName": "ObjectCreated:Put",
                "s3": {
                    "bucket": {"name": "photos", "arn": "arn:aws:s3:::photos"},
                    "object": {"key": key, "size": 1024, "sequencer": sequencer},
                },
            }
        ]
    }


def run_thumbnails(module: ModuleType) -> None:
    module.make_thumbnail = Calls(lambda bucket, key: f"thumbnails/{key}")
    key = f"{event_id()}.jpg"
    first = module.handler(s3_notification(key, "0055AED6DCD90281E5"), FakeLambdaContext())
    assert first == module.handler(s3_notification(key, "0055AED6DCD90281E5"), None)  # repeated
    module.handler(s3_notification(key, "0055AED6DCD90281E9"), FakeLambdaContext())  # new version
    assert [("photos", key), ("photos", key)] == module.make_thumbnail.args


def run_testing_payments(module_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IDEMPOTENCY_TABLE", "IdempotencyTable")  # read when it is imported
    module = load_example(module_path.relative_to(EXAMPLES).as_posix())
    module.capture = Calls(lambda payment_id, amount: f"rcpt_{payment_id}")
    payment_id = event_id()
    event = sqs_batch(body={"payment_id": payment_id, "amount": "10.00"})
    assert {"batchItemFailures": []} == module.handler(event, FakeLambdaContext())
    assert {"batchItemFailures": []} == module.handler(event, FakeLambdaContext())
    assert [(payment_id, "10.00")] == module.capture.args


def run_testing_async_orders(module_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IDEMPOTENCY_TABLE", "IdempotencyTable")  # read when it is imported
    module = load_example(module_path.relative_to(EXAMPLES).as_posix())
    reserved: list[str] = []

    async def reserve_stock(order_id: str) -> str:
        reserved.append(order_id)
        return f"res_{order_id}"

    module.reserve_stock = reserve_stock
    order_id = event_id()
    first = module.handler({"order_id": order_id}, FakeLambdaContext())
    assert {"order_id": order_id, "reservation": f"res_{order_id}"} == first
    assert first == module.handler({"order_id": order_id}, FakeLambdaContext())
    assert [order_id] == reserved


# --------------------------------------------------------------------------------- production
def emf_documents(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if '"_aws"' in line]


def metric_sum(documents: list[dict[str, Any]], name: str) -> float:
    """Sum a metric over EMF documents (a value, or a list of values as Powertools writes)."""
    values = [d.get(name, []) for d in documents]
    return sum(sum(v) if isinstance(v, list) else v for v in values)


def run_emf_metrics(module: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    event = {"order_id": event_id()}
    module.handler(event, FakeLambdaContext())
    module.handler(event, FakeLambdaContext())
    documents = emf_documents(capsys.readouterr().out)
    namespaces = {d["_aws"]["CloudWatchMetrics"][0]["Namespace"] for d in documents}
    assert {"Orders"} == namespaces
    assert {"orders"} == {d["service"] for d in documents}
    assert 1 == metric_sum(documents, "Claimed")
    assert 1 == metric_sum(documents, "Replayed")


def run_powertools_metrics(module: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    event = {"order_id": event_id()}
    module.handler(event, FakeLambdaContext())
    documents = emf_documents(capsys.readouterr().out)
    assert 1 == len(documents)
    assert "Orders" == documents[0]["_aws"]["CloudWatchMetrics"][0]["Namespace"]
    assert 1 == metric_sum(documents, "Claimed")


def run_powertools_logger(module: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    context = FakeLambdaContext()
    # The "orders" logger is process-wide: when another test (the sample app) configured it
    # first, Powertools reuses its handler, still writing to that test's stdout.
    handler = module.logger.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    previous = handler.setStream(sys.stdout)
    try:
        module.handler({"order_id": event_id()}, context)
    finally:
        handler.setStream(previous)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    messages = [line["message"] for line in lines]
    assert "order accepted" in messages
    assert {"orders"} == {line["service"] for line in lines}
    assert {context.aws_request_id} == {line["function_request_id"] for line in lines}
    assert any("CLAIMED" in str(line) for line in lines), lines


def run_transaction(module: ModuleType, aws: str) -> None:
    dynamodb = boto3.resource("dynamodb")
    sku = event_id()
    dynamodb.Table("stock").put_item(Item={"sku": sku, "qty": 1})
    event = {"order_id": event_id(), "total": "25.00", "sku": sku}
    first = module.handler(event, FakeLambdaContext())
    assert first == module.handler(event, FakeLambdaContext())  # replayed, not sold twice
    assert 0 == dynamodb.Table("stock").get_item(Key={"sku": sku})["Item"]["qty"]
    order = dynamodb.Table("orders").get_item(Key={"order_id": event["order_id"]})["Item"]
    assert Decimal("25.00") == order["total"]
    sold_out = {"order_id": event_id(), "total": "25.00", "sku": sku}
    with pytest.raises(IdempotencyTransactionConflictError):
        module.handler(sold_out, FakeLambdaContext())
    assert "Item" not in dynamodb.Table("orders").get_item(Key={"order_id": sold_out["order_id"]})


def run_large_results(module: ModuleType, aws: str) -> None:
    event = {"report_id": event_id()}
    first = module.handler(event, FakeLambdaContext())
    assert 20_000 == len(first["rows"])
    assert first == module.handler(event, FakeLambdaContext())
    listing = boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix="idempotency/")
    assert listing["KeyCount"] >= 1


# --------------------------------------------------------------------------------------- http
def http_request(key: str, body: dict[str, Any], user: str | None = None) -> dict[str, Any]:
    """An HTTP API (payload 2.0) ``POST /orders``; with ``user``, through a Lambda authorizer."""
    request_context: dict[str, Any] = {
        "apiId": "r3pmxmplak",
        "stage": "prod",
        "http": {"method": "POST", "path": "/orders"},
    }
    if user is not None:
        request_context["authorizer"] = {"lambda": {"userId": user}}
    return {
        "version": "2.0",
        "routeKey": "POST /orders",
        "rawPath": "/orders",
        "rawQueryString": "",
        "headers": {"content-type": "application/json", "idempotency-key": key},
        "requestContext": request_context,
        "body": json.dumps(body),
        "isBase64Encoded": False,
    }


def run_create_order(module: ModuleType) -> None:
    key = event_id()
    first = module.handler(http_request(key, {"sku": "A1"}), FakeLambdaContext())
    assert 201 == first["statusCode"]
    retry = module.handler(http_request(key, {"sku": "A1"}), FakeLambdaContext())
    assert json.loads(first["body"]) == json.loads(retry["body"])  # the same order, not a new one
    assert "true" == retry["headers"]["Idempotent-Replayed"]
    changed = module.handler(http_request(key, {"sku": "B2"}), FakeLambdaContext())
    assert 422 == changed["statusCode"]
    missing = http_request(key, {"sku": "A1"})
    del missing["headers"]["idempotency-key"]
    assert 400 == module.handler(missing, FakeLambdaContext())["statusCode"]


def run_caller(module: ModuleType) -> None:
    key = event_id()
    first = module.handler(http_request(key, {"sku": "A1"}, user="alice"), FakeLambdaContext())
    retry = module.handler(http_request(key, {"sku": "A1"}, user="alice"), FakeLambdaContext())
    other = module.handler(http_request(key, {"sku": "A1"}, user="bob"), FakeLambdaContext())
    assert 201 == first["statusCode"] == other["statusCode"]
    assert first["body"] == retry["body"]
    assert "true" == retry["headers"]["Idempotent-Replayed"]
    assert "Idempotent-Replayed" not in other.get("headers", {})  # Bob's own run
    assert json.loads(first["body"])["order_id"] != json.loads(other["body"])["order_id"]


# -------------------------------------------------------------------------------------- redis
def run_redis_charge_order(
    module_path: Path, redis_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = redis_client.connection_pool.connection_kwargs["port"]
    monkeypatch.setenv("REDIS_HOST", "127.0.0.1")
    monkeypatch.setenv("REDIS_PORT", str(port))
    monkeypatch.setenv("REDIS_TLS", "false")
    module = load_example(module_path.relative_to(EXAMPLES).as_posix())
    order_id = event_id()
    first = module.handler({"order_id": order_id, "note": "a"}, FakeLambdaContext())
    retry = module.handler({"order_id": order_id, "note": "b"}, FakeLambdaContext())
    assert first == retry  # the same receipt: the handler ran once
    assert 1 == len(redis_client.keys("*"))


# ---------------------------------------------------------------------------------- migrating
def run_after_swap(module: ModuleType) -> None:
    event = {"order_id": event_id(), "quantity": 2}
    first = module.lambda_handler(event, FakeLambdaContext())
    assert {"order_id": event["order_id"], "receipt_id": ANY} == first
    assert first == module.lambda_handler(event, FakeLambdaContext())  # replayed


def run_batch_after_swap(module: ModuleType) -> None:
    module.charge = Calls("ch_1")
    event = sqs_event({"order": 1}, {"order": 2})
    assert {"batchItemFailures": []} == module.lambda_handler(event, FakeLambdaContext())
    assert {"batchItemFailures": []} == module.lambda_handler(event, FakeLambdaContext())
    assert 2 == len(module.charge.args)  # once per message: the redelivery replayed


def run_batch_powertools_keys(module_path: Path) -> None:
    """The BatchProcessor version processes a batch; after the switch it replays, none runs."""

    def deploy(relative: str) -> ModuleType:  # one module name for both: the prefix stays
        spec = importlib.util.spec_from_file_location("app", EXAMPLES / relative)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.charge = Calls("ch_1")
        return module

    event = sqs_event({"order": 1}, {"order": 2}, {"order": 3})
    before = deploy("migrating/batch_after_swap.py")
    assert {"batchItemFailures": []} == before.lambda_handler(event, FakeLambdaContext())
    after = deploy(module_path.relative_to(EXAMPLES).as_posix())
    for record in event["Records"]:  # SQS delivers the batch again
        record["attributes"]["ApproximateReceiveCount"] = "2"
    assert {"batchItemFailures": []} == after.lambda_handler(event, FakeLambdaContext())
    assert 3 == len(before.charge.args)
    assert [] == after.charge.args


def run_batch_adapter(module: ModuleType) -> None:
    event = sqs_event({"order": 1}, {"order": 2}, {"order": 3})
    assert {"batchItemFailures": []} == module.handler(event, FakeLambdaContext())
    assert {"batchItemFailures": []} == module.handler(event, FakeLambdaContext())
    # One record at a time, in batch order, once per message.
    assert [r["body"] for r in event["Records"]] == module.ledger.entries


def run_order_workflow(module: ModuleType) -> None:
    durable_runner = pytest.importorskip("aws_durable_execution_sdk_python_testing.runner")
    charges = Calls({"charge_id": "ch_1", "amount": 5})
    charge_card = module.charge_card
    keys: list[str] = []

    def charging(order_id: str, amount: int, idempotency_key: str) -> Any:
        keys.append(idempotency_key)
        charges(order_id)
        return charge_card(order_id, amount, idempotency_key)

    module.charge_card = charging
    order = json.dumps({"order_id": event_id(), "amount": 5})
    results = []
    with durable_runner.DurableFunctionTestRunner(handler=module.handler) as runner:
        for name in ("first", "duplicate"):
            results.append(runner.run(input=order, execution_name=name, execution_timeout=60))
    first, duplicate = (json.loads(result.result) for result in results)
    assert first == duplicate  # the second execution got the stored result
    assert 1 == len(charges.args)
    assert keys[0].startswith("test-func.idempotent_lambda.durable#")
    assert first["receipt"]["message_id"].endswith("_ch_" + first["order_id"])


class LogOrder(logging.Handler):
    """Records the messages of the SDK's execution logger and of idempotent_lambda's decisions."""

    LOGGERS = ("aws_durable_execution_sdk_python.execution", "idempotent_lambda")

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def __enter__(self) -> LogOrder:
        for name in self.LOGGERS:
            logger = logging.getLogger(name)
            logger.addHandler(self)
            self.levels = getattr(self, "levels", {}) | {name: logger.level}
            logger.setLevel(logging.DEBUG)
        return self

    def __exit__(self, *exc: object) -> None:
        for name in self.LOGGERS:
            logging.getLogger(name).removeHandler(self)
            logging.getLogger(name).setLevel(self.levels[name])


def run_claims_plugin(module: ModuleType) -> None:
    """A cancelled order fails its execution; the claim goes once the SDK answered FAILED."""
    durable_runner = pytest.importorskip("aws_durable_execution_sdk_python_testing.runner")
    module.ship = Calls(lambda order_id: {"tracking_id": f"trk_{order_id}"})
    order_id = event_id()
    cancelled = json.dumps({"order_id": order_id, "cancelled": True})
    order = json.dumps({"order_id": order_id})
    with (
        durable_runner.DurableFunctionTestRunner(handler=module.handler) as runner,
        LogOrder() as logs,
    ):
        failed = runner.run(input=cancelled, execution_name="cancelled", execution_timeout=60)
        results = [
            runner.run(input=order, execution_name=name, execution_timeout=60)
            for name in ("placed", "duplicate")
        ]
    assert "FAILED" == failed.status.value
    assert ["SUCCEEDED", "SUCCEEDED"] == [result.status.value for result in results]
    assert results[0].result == results[1].result
    assert [(order_id,)] == module.ship.args
    # The plugin released the claim after the SDK had failed the execution, not before.
    failed_at = logs.messages.index("Execution failed")
    released_at = next(n for n, m in enumerate(logs.messages) if "outcome=RELEASED" in m)
    assert failed_at < released_at


def run_claims_plugin_env(module_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The function's environment selects the plugin through its entry point."""
    monkeypatch.setenv("DURABLE_EXECUTION_PLUGINS", "idempotent_lambda.claims")
    run_claims_plugin(load_example(module_path.relative_to(EXAMPLES).as_posix()))


def run_outbox(
    module: ModuleType,
    aws: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Emit with the order, publish from the table's stream, consume from a rule's queue."""
    from idempotent_lambda.testing import RuleQueue, TableStream

    for service in ("EVENTBRIDGE", "SQS", "DYNAMODB_STREAMS"):
        monkeypatch.setenv(f"AWS_ENDPOINT_URL_{service}", aws)
    dynamodb = boto3.client("dynamodb")
    table = dynamodb.describe_table(TableName="IdempotencyTable")["Table"]
    if not table.get("StreamSpecification", {}).get("StreamEnabled"):
        dynamodb.update_table(
            TableName="IdempotencyTable",
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
        )
    stream = TableStream.of_table("IdempotencyTable")
    publisher = load_example("outbox/publisher.py")
    consumer = load_example("outbox/consumer.py")
    sweeper = load_example("outbox/sweeper.py")
    pattern = {"source": ["shop.orders"], "detail-type": ["OrderCreated"]}
    with RuleQueue(pattern) as queue:
        order = {"order_id": event_id(), "total": "25.00"}
        first = module.handler(order, FakeLambdaContext())
        assert first == module.handler(order, FakeLambdaContext())  # a retry: one event
        batch = stream.next_event()
        for _ in range(2):  # the stream delivers the records again: still one event
            assert {"batchItemFailures": []} == publisher.handler(batch, None)
        delivered = queue.receive()
        assert [first["event_id"]] == [
            json.loads(r["body"])["detail"]["outbox"]["id"] for r in delivered["Records"]
        ]
        capsys.readouterr()
        for _ in range(2):  # SQS delivers the message again: one confirmation
            assert {"batchItemFailures": []} == consumer.handler(delivered, FakeLambdaContext())
        assert [
            f"confirmation sent for {order['order_id']}"
        ] == capsys.readouterr().out.splitlines()
        queue.settle(delivered, {"batchItemFailures": []})
        # an order whose stream record never reaches the publisher, emitted 10 minutes ago
        late = module.handler({"order_id": event_id(), "total": "5.00"}, FakeLambdaContext())
        (key,) = [
            r["dynamodb"]["Keys"]
            for r in stream.read()
            if r["dynamodb"].get("NewImage", {}).get("outbox_id") == {"S": late["event_id"]}
        ]
        dynamodb.update_item(
            TableName="IdempotencyTable",
            Key=key,
            UpdateExpression="SET outbox_emitted_at = outbox_emitted_at - :ten_minutes",
            ExpressionAttributeValues={":ten_minutes": {"N": "600000"}},
        )
        answer = sweeper.handler({}, FakeLambdaContext())
        assert (1, 0) == (answer["due"], answer["failed"])
        assert [late["event_id"]] == [
            json.loads(r["body"])["detail"]["outbox"]["id"] for r in queue.receive()["Records"]
        ]


def run_ordered_consumer(module: ModuleType) -> None:
    """Version 2 before version 1: it waits, then both apply in order; a repeat is dropped."""
    order_id = event_id()

    def message(version: int, state: str) -> dict[str, Any]:
        detail = {"order_id": order_id, "version": version, "state": state}
        detail["outbox"] = {"id": f"{order_id}-{version}"}
        return {"body": json.dumps({"detail": detail}), "message_id": event_id()}

    paid, created = message(2, "PAID"), message(1, "CREATED")
    early = module.handler(sqs_batch(records=[paid]), FakeLambdaContext())
    assert 1 == len(early["batchItemFailures"])  # SQS delivers it again later
    for arrives in (created, paid):  # then version 1, and version 2 again
        assert {"batchItemFailures": []} == module.handler(
            sqs_batch(records=[arrives]), FakeLambdaContext()
        )
    again = {**created, "message_id": event_id()}  # the publisher sent version 1 twice
    assert {"batchItemFailures": []} == module.handler(
        sqs_batch(records=[again]), FakeLambdaContext()
    )
    view = boto3.resource("dynamodb").Table("order_views").get_item(Key={"order_id": order_id})
    assert (2, "PAID") == (view["Item"]["version"], view["Item"]["state"])


RUNNERS: dict[str, Callable[..., None]] = {
    "getting_started/first_handler.py": run_first_handler,
    "getting_started/any_function.py": run_any_function,
    "sqs/process_payments.py": run_process_payments,
    "sqs/concurrent_batch.py": run_concurrent_batch,
    "streams/send_welcome.py": run_send_welcome,
    "kinesis/count_clicks.py": run_count_clicks,
    "kafka/ship_orders.py": run_ship_orders,
    "event_keys/thumbnails.py": run_thumbnails,
    "testing/payments.py": run_testing_payments,
    "testing/async_orders.py": run_testing_async_orders,
    "production/emf_metrics.py": run_emf_metrics,
    "production/powertools_metrics.py": run_powertools_metrics,
    "production/powertools_logger.py": run_powertools_logger,
    "production/transaction.py": run_transaction,
    "production/large_results.py": run_large_results,
    "http/create_order.py": run_create_order,
    "http/caller.py": run_caller,
    "redis/charge_order.py": run_redis_charge_order,
    "durable/order_workflow.py": run_order_workflow,
    "durable/claims_plugin.py": run_claims_plugin,
    "durable/claims_plugin_env.py": run_claims_plugin_env,
    "migrating/after_swap.py": run_after_swap,
    "migrating/batch_after_swap.py": run_batch_after_swap,
    "migrating/batch_adapter.py": run_batch_adapter,
    "migrating/batch_powertools_keys.py": run_batch_powertools_keys,
    "tracing/otlp_exporter.py": run_otlp_exporter,
    "outbox/create_order.py": run_outbox,
    "outbox/ordered_consumer.py": run_ordered_consumer,
    "step_functions/reserve_stock.py": run_reserve_stock,
    **RECIPES,
}
#: Examples that a runner above loads and runs with the one it is given.
RUN_ALONG = ["outbox/publisher.py", "outbox/consumer.py", "outbox/sweeper.py"]
#: Examples that are pytest modules themselves: run by pytest in a child process.
TEST_MODULES = [
    "testing/test_handler.py",
    "testing/test_batch_handler.py",
    "testing/test_with_moto.py",
    "testing/test_dynamodb_store.py",
    "testing/test_payments.py",
    "testing/test_async_orders.py",
    "testing/test_table_stream.py",
    "http/test_create_order.py",
    "durable/test_order_workflow.py",
    "outbox/test_whole_path.py",
    "tracing/test_spans.py",
]
#: CDK apps: synthesized (and linted) by cdk/tests in the CDK's own venv (`make cdk-check`).
SYNTHESIZED = ["cdk/app.py"]


@pytest.mark.parametrize("relative", sorted(RUNNERS))
def test_example_runs(relative: str, aws: str, request: pytest.FixtureRequest) -> None:
    """The example's handler runs once per key and replays, against moto (or redis-server).

    A runner's first parameter is the example: imported here (``module``), or its path
    (``module_path``) when the runner must set the environment before importing it. The
    other parameters name the fixtures it needs.
    """
    runner = RUNNERS[relative]
    first, *fixtures = inspect.signature(runner).parameters
    wanted = {name: request.getfixturevalue(name) for name in fixtures}
    example: Path | ModuleType = EXAMPLES / relative
    if first == "module":
        example = load_example(relative)
    # In a copied context: a context the example registers (register_lambda_context) stays
    # with it, as it stays with one invocation in Lambda, instead of reaching later tests.
    contextvars.copy_context().run(runner, example, **wanted)


@pytest.mark.parametrize("relative", TEST_MODULES)
def test_example_test_module_passes(relative: str) -> None:
    """A testing example passes under pytest with the plugin's fixtures."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLES / relative)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert 0 == result.returncode, result.stdout + result.stderr
    assert " passed" in result.stdout
    assert " failed" not in result.stdout


@pytest.mark.parametrize("relative", ["kinesis/mapping.yaml", "kafka/mapping.yaml"])
def test_example_mapping_reports_partial_batches_and_bounds_retries(relative: str) -> None:
    """The mappings shown on the adapter pages turn on partial responses and bound retries."""
    from samples.local_stack import CloudFormationLoader

    with (EXAMPLES / relative).open(encoding="utf-8") as stream:
        template = yaml.load(stream, Loader=CloudFormationLoader)
    (mapping,) = template["Resources"].values()
    properties = mapping["Properties"]
    assert "AWS::Lambda::EventSourceMapping" == mapping["Type"]
    assert ["ReportBatchItemFailures"] == properties["FunctionResponseTypes"]
    assert properties["BisectBatchOnFunctionError"] is True
    assert 0 <= properties["MaximumRetryAttempts"] <= 10_000
    assert 60 <= properties["MaximumRecordAgeInSeconds"] <= 604_800
    assert "OnFailure" in properties["DestinationConfig"]
    shown = "\n".join(page.read_text(encoding="utf-8") for page in DOCS.rglob("*.md"))
    assert f'--8<-- "examples/{relative}"' in shown


def test_every_example_is_run() -> None:
    """No file under examples/ escapes the tests above."""
    found = {path.relative_to(EXAMPLES).as_posix() for path in EXAMPLES.rglob("*.py")}
    assert set(RUNNERS) | set(RUN_ALONG) | set(TEST_MODULES) | set(SYNTHESIZED) == found


def fenced_blocks(text: str) -> list[tuple[str, list[str]]]:
    """Return ``(language, lines)`` for every fenced code block of a Markdown text."""
    blocks: list[tuple[str, list[str]]] = []
    fence: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if fence is None and stripped.startswith("```"):
            fence = stripped[3:].split()[0] if stripped[3:].split() else ""
            blocks.append((fence, []))
        elif fence is not None and stripped.startswith("```"):
            fence = None
        elif fence is not None:
            blocks[-1][1].append(line)
    return blocks


def test_docs_show_only_examples_that_run() -> None:
    """Every fenced Python block in docs/ is a snippet include of a file under examples/."""
    for page in sorted(DOCS.rglob("*.md")):
        for language, lines in fenced_blocks(page.read_text(encoding="utf-8")):
            if language not in ("python", "py", "python3", "pycon"):
                continue
            assert lines, f"{page.name}: empty Python block"
            for line in lines:
                match = SNIPPET.match(line.strip())
                assert match, f"{page.name}: Python block not from examples/: {line!r}"
                assert match["path"].startswith("examples/"), f"{page.name}: {line!r}"
                assert (ROOT / match["path"]).is_file(), f"{page.name}: {line!r}"


def test_docs_include_every_example() -> None:
    """Every non-test example is shown somewhere in the docs."""
    shown = {
        match["path"].removeprefix("examples/")
        for page in DOCS.rglob("*.md")
        for line in page.read_text(encoding="utf-8").splitlines()
        if (match := SNIPPET.match(line.strip()))
    }
    assert set(RUNNERS) | set(RUN_ALONG) | set(TEST_MODULES) | set(SYNTHESIZED) <= shown


def test_readme_example_is_the_tested_one() -> None:
    """The README (which the package index shows without snippets) copies first_handler.py."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    python = [lines for language, lines in fenced_blocks(readme) if language == "python"]
    example = (EXAMPLES / "getting_started" / "first_handler.py").read_text(encoding="utf-8")
    assert [example.rstrip("\n").splitlines()] == python


def test_readme_is_short_and_its_links_work_off_the_repository() -> None:
    """The package index shows the README alone: a screen or two, every link absolute."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 200
    targets = re.findall(r"\]\(([^)]+)\)", readme)
    assert targets
    assert all(target.startswith("https://") for target in targets), targets
