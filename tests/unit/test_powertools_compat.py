"""Powertools compatibility at the code level: a docs-style module runs after an import swap."""

from __future__ import annotations

import importlib.util
import inspect
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import idempotent_lambda
from idempotent_lambda import IdempotencyKeyError, IdempotencyValidationError
from idempotent_lambda.testing import FakeLambdaContext, create_idempotency_table

APP = Path(__file__).with_name("powertools_docs_app.py")


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """Import a fresh copy of the docs-style module against moto's DynamoDB server.

    A server (`local_dynamodb`) and a table of its own, not ``moto.mock_aws``: entering and
    leaving that mock wipes every in-process moto backend, so the tables of the servers other
    tests share would vanish, depending on which tests ran around this one.
    """
    pytest.importorskip("moto")
    import boto3

    from idempotent_lambda.testing import local_dynamodb

    table = f"IdempotencyTable-{uuid.uuid4().hex}"
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "IDEMPOTENCY_TABLE": table,
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    with local_dynamodb() as endpoint:
        monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", endpoint)
        create_idempotency_table(
            boto3.client("dynamodb", region_name="us-east-1", endpoint_url=endpoint),
            table_name=table,
        )
        name = f"powertools_docs_app_{uuid.uuid4().hex}"
        spec = importlib.util.spec_from_file_location(name, APP)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses resolve their module's annotations here
        try:
            spec.loader.exec_module(module)
            yield module
        finally:
            del sys.modules[name]


def test_getting_started_handler(app: ModuleType) -> None:
    """The getting-started handler runs once and replays its payment id."""
    event = {"user_id": "u-1", "product_id": "p-1"}

    first = app.lambda_handler(event, FakeLambdaContext())
    second = app.lambda_handler(event, FakeLambdaContext())

    assert 200 == first["statusCode"]
    assert first == second


def test_handler_errors_are_not_stored(app: ModuleType) -> None:
    """The handler's own exception propagates unchanged, not wrapped."""
    with pytest.raises(app.PaymentError):
        app.lambda_handler({"user_id": "u-1"}, FakeLambdaContext())


def test_payload_subset_validation_and_local_cache(app: ModuleType) -> None:
    """A subset key replays across other fields; a different ``amount`` fails validation."""
    event = {"user_id": "u-1", "product_id": "p-1", "amount": 10, "request_id": "r-1"}

    first = app.subset_handler(event, FakeLambdaContext())
    replay = app.subset_handler({**event, "request_id": "r-2"}, FakeLambdaContext())
    with pytest.raises(IdempotencyValidationError):
        app.subset_handler({**event, "amount": 11}, FakeLambdaContext())

    assert first == replay


def test_required_key(app: ModuleType) -> None:
    """With ``raise_on_no_idempotency_key`` an event without the key raises."""
    with pytest.raises(IdempotencyKeyError):
        app.required_key_handler({"other": 1}, FakeLambdaContext())
    first = app.required_key_handler({"user.uid": "u-1", "order_id": 1}, FakeLambdaContext())

    assert {"message": "success", "statusCode": 200} == first


def test_idempotent_function_with_registered_context(app: ModuleType) -> None:
    """``register_lambda_context`` + a dataclass payload by keyword replays the string result."""
    first = app.order_handler({"order_id": 1}, FakeLambdaContext())
    second = app.order_handler({"order_id": 1}, FakeLambdaContext())
    other = app.order_handler({"order_id": 2}, FakeLambdaContext())

    assert first == second
    assert first != other


@pytest.mark.parametrize(
    ("function", "order_type"),
    [
        ("process_order_annotated", "PydanticOrder"),
        ("process_order_explicit", "PydanticOrder"),
        ("process_order_dataclass", "Order"),
    ],
)
def test_output_serializers(app: ModuleType, function: str, order_type: str) -> None:
    """``PydanticSerializer`` (class or instance) and ``DataclassSerializer`` replay instances."""
    item = {"sku": "fake", "description": "sample"}
    if order_type == "Order":
        order = app.Order(item=app.OrderItem(**item), order_id=1)
    else:
        order = app.PydanticOrder(item=item, order_id=1)
    process = getattr(app, function)

    first = process(order=order)
    replay = process(order=order)

    assert first == replay
    assert type(first) is type(replay)


POWERTOOLS_ONLY = {"handler", "event", "context", "function", "kwargs"}


@pytest.mark.parametrize(
    "name", ["idempotent", "idempotent_function", "IdempotencyConfig", "DynamoDBPersistenceLayer"]
)
def test_every_powertools_keyword_is_accepted(name: str) -> None:
    """Each keyword of Powertools' API exists here under the same name."""
    powertools = pytest.importorskip("aws_lambda_powertools.utilities.idempotency")
    theirs = set(inspect.signature(getattr(powertools, name)).parameters) - POWERTOOLS_ONLY
    ours = set(inspect.signature(getattr(idempotent_lambda, name)).parameters)

    assert set() == theirs - ours


def test_config_defaults_match_powertools_except_the_hash() -> None:
    """Defaults are Powertools' own, except the hash: None, the record format's (md5 by default)."""
    powertools = pytest.importorskip("aws_lambda_powertools.utilities.idempotency")
    theirs = inspect.signature(powertools.IdempotencyConfig).parameters
    ours = inspect.signature(idempotent_lambda.IdempotencyConfig).parameters

    differing = {
        name: (theirs[name].default, ours[name].default)
        for name in theirs
        if theirs[name].default != ours[name].default
    }
    assert {"hash_function": ("md5", None)} == differing
    assert "md5" == idempotent_lambda.IdempotencyConfig().hash_name
    assert "md5" == idempotent_lambda.IdempotencyConfig(record_format="powertools").hash_name
    assert "sha256" == idempotent_lambda.IdempotencyConfig(record_format="native").hash_name


def test_serializer_module_names_match_powertools() -> None:
    """The serializer classes exist under Powertools' names, with a ``model`` keyword."""
    from idempotent_lambda import serialization

    for name in ("DataclassSerializer", "PydanticSerializer", "BaseIdempotencySerializer"):
        assert hasattr(serialization, name)
    assert ["model"] == list(inspect.signature(serialization.PydanticSerializer).parameters)
    assert ["model"] == list(inspect.signature(serialization.DataclassSerializer).parameters)


def test_record_exposes_powertools_data_record_names() -> None:
    """A response hook written for Powertools' DataRecord finds the same attributes."""
    import datetime

    record = idempotent_lambda.IdempotencyRecord(
        "k", idempotent_lambda.Status.COMPLETED, 1_800_000_000, None, '{"a":1}', "h"
    )
    actual = (
        record.idempotency_key,
        record.status,
        record.expiry_timestamp,
        record.in_progress_expiry_timestamp,
        record.response_data,
        record.payload_hash,
        record.response_json_as_dict(),
        record.get_expiration_datetime(),
    )
    expiration = datetime.datetime(2027, 1, 15, 8, 0, tzinfo=datetime.timezone.utc)
    assert ("k", "COMPLETED", 1_800_000_000, None, '{"a":1}', "h", {"a": 1}, expiration) == actual


def test_public_api_is_pinned() -> None:
    """``idempotent_lambda.__all__`` is exactly the documented public surface, sorted."""
    expected = [
        "BasePersistenceLayer",
        "Decision",
        "DynamoDBPersistenceLayer",
        "IdempotencyAlreadyInProgressError",
        "IdempotencyConfig",
        "IdempotencyConfigError",
        "IdempotencyError",
        "IdempotencyFunctions",
        "IdempotencyKeyError",
        "IdempotencyPersistenceLayerError",
        "IdempotencyRecord",
        "IdempotencyTransactionConflictError",
        "IdempotencyTransactionError",
        "IdempotencyUnstorableResultError",
        "IdempotencyValidationError",
        "IdempotentHookFunction",
        "InMemoryPersistenceLayer",
        "Outcome",
        "PersistenceStore",
        "Status",
        "idempotent",
        "idempotent_function",
    ]

    assert expected == idempotent_lambda.__all__
    assert sorted(expected) == expected
    assert all(getattr(idempotent_lambda, name) is not None for name in expected)


def test_errors_share_one_base_class() -> None:
    """Every library error derives from `IdempotencyError`."""
    errors = [
        n for n in idempotent_lambda.__all__ if n.endswith("Error") and n != "IdempotencyError"
    ]

    bases = {
        n: issubclass(getattr(idempotent_lambda, n), idempotent_lambda.IdempotencyError)
        for n in errors
    }
    assert dict.fromkeys(errors, True) == bases


def test_status_equals_its_stored_strings() -> None:
    """``Status`` members are equal to the strings in the table."""
    from idempotent_lambda import Status

    assert ["IN_PROGRESS", "COMPLETED", "EXPIRED"] == [
        Status.IN_PROGRESS,
        Status.COMPLETED,
        Status.EXPIRED,
    ]
    assert "COMPLETED" == str(Status.COMPLETED)
