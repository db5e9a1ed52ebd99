"""A key prefix the CDK construct did not grant fails at decoration, naming both prefixes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from idempotent_lambda import idempotent
from idempotent_lambda._grant import GRANTED_KEY_PREFIXES_ENV, large_result_prefix
from idempotent_lambda.exceptions import IdempotencyConfigError, IdempotencyKeyPrefixNotGrantedError
from idempotent_lambda.persistence.in_memory import InMemoryPersistenceLayer

CDK_TABLE = Path(__file__).resolve().parents[2] / "cdk" / "idempotent_lambda_cdk" / "_table.py"


def handler(event: Any, context: Any) -> Any:
    return event


def test_a_key_prefix_not_granted_fails_at_decoration(monkeypatch: pytest.MonkeyPatch) -> None:
    """The error names the prefix in use and the granted one."""
    monkeypatch.setenv(GRANTED_KEY_PREFIXES_ENV, "orders.create_order")
    decorate = idempotent(persistence_store=InMemoryPersistenceLayer(), key_prefix="orders.create")

    with pytest.raises(IdempotencyKeyPrefixNotGrantedError) as raised:
        decorate(handler)

    assert isinstance(raised.value, IdempotencyConfigError)
    assert ("orders.create", ["orders.create_order"]) == (
        raised.value.key_prefix,
        raised.value.granted,
    )
    assert "'orders.create'" in str(raised.value)
    assert "'orders.create_order#'" in str(raised.value)


def test_a_default_prefix_is_checked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without key_prefix, the default prefix is the one compared."""
    monkeypatch.setenv(GRANTED_KEY_PREFIXES_ENV, "other")
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "fn")

    with pytest.raises(IdempotencyKeyPrefixNotGrantedError, match=r"'fn\.tests\.unit"):
        idempotent(persistence_store=InMemoryPersistenceLayer())(handler)


def test_a_granted_prefix_decorates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any of the granted prefixes is accepted."""
    monkeypatch.setenv(GRANTED_KEY_PREFIXES_ENV, "a,orders.create_order")
    decorated = idempotent(
        persistence_store=InMemoryPersistenceLayer(), key_prefix="orders.create_order"
    )(handler)
    assert callable(decorated)


def test_without_the_construct_nothing_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Powertools swap with no construct keeps working: no variable, no check."""
    monkeypatch.delenv(GRANTED_KEY_PREFIXES_ENV, raising=False)
    assert callable(
        idempotent(persistence_store=InMemoryPersistenceLayer(), key_prefix="x")(handler)
    )


def test_the_construct_sets_the_variable_the_library_reads() -> None:
    """The CDK package names the same variable and the same offload prefix as the library."""
    source = CDK_TABLE.read_text()
    assert f'GRANTED_KEY_PREFIXES_ENV = "{GRANTED_KEY_PREFIXES_ENV}"' in source
    assert 'LARGE_RESULTS_ROOT = "idempotency/"' in source
    assert "idempotency/orders.create_order/" == large_result_prefix("orders.create_order")


def test_an_access_denied_claim_names_the_key_prefix_and_the_iam_rule() -> None:
    """AccessDenied on the claim's PutItem becomes a typed error naming the prefix and rule."""
    import boto3
    from botocore.stub import Stubber

    from idempotent_lambda import DynamoDBPersistenceLayer
    from idempotent_lambda.exceptions import (
        IdempotencyClaimAccessDeniedError,
        IdempotencyPersistenceLayerError,
    )
    from idempotent_lambda.record import IdempotencyRecord, Status

    client = boto3.client(
        "dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    store = DynamoDBPersistenceLayer("idempotency", boto3_client=client)
    record = IdempotencyRecord(
        idempotency_key="orders.create#abc",
        status=Status.IN_PROGRESS,
        expiry_timestamp=2_000_000_000,
    )
    with Stubber(client) as stub:
        stub.add_client_error("put_item", "AccessDeniedException", "not authorized")
        with pytest.raises(IdempotencyClaimAccessDeniedError) as raised:
            store.claim(record, now_ms=1_000, lease_cutoff_ms=1_000)

    assert isinstance(raised.value, IdempotencyPersistenceLayerError)
    assert ("orders.create", "idempotency") == (raised.value.key_prefix, raised.value.table_name)
    assert "dynamodb:LeadingKeys = 'orders.create#*'" in str(raised.value)


class _DurableContext:
    """The public surface `durable.step` reads: the execution's ARN and ``step``."""

    execution_context = type("ExecutionContext", (), {"durable_execution_arn": "arn:exec/1"})()
    lambda_context = None

    def step(self, func: Any, name: str | None = None, config: Any = None) -> Any:
        return func(object())


def _decorate_each(key_prefix: str) -> dict[str, Callable[[], Any]]:
    """One way to use each public entry point with ``key_prefix``, run when called."""
    from idempotent_lambda import durable, idempotent_function
    from idempotent_lambda.adapters.api_gateway import idempotent_http
    from idempotent_lambda.adapters.dynamodb_stream import idempotent_stream_handler
    from idempotent_lambda.adapters.kafka import idempotent_kafka_handler
    from idempotent_lambda.adapters.kinesis import idempotent_kinesis_handler
    from idempotent_lambda.adapters.sqs import idempotent_sqs_handler

    def record(record: Any, context: Any) -> Any:
        return None

    def data(order: Any) -> Any:
        return order

    store = InMemoryPersistenceLayer()
    options: dict[str, Any] = {"persistence_store": store, "key_prefix": key_prefix}
    batch = (
        idempotent_sqs_handler,
        idempotent_stream_handler,
        idempotent_kinesis_handler,
        idempotent_kafka_handler,
    )
    ways: dict[str, Callable[[], Any]] = {
        "idempotent": lambda: idempotent(**options)(handler),
        "idempotent_function": lambda: idempotent_function(
            data_keyword_argument="order", **options
        )(data),
        "idempotent_http": lambda: idempotent_http(**options)(handler),
        "durable.step": lambda: durable.step(_DurableContext(), lambda _: 1, name="s", **options),
    }
    ways.update({d.__name__: functools.partial(lambda d: d(**options)(record), d) for d in batch})
    return ways


ENTRY_POINTS = sorted(_decorate_each("x"))


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_every_entry_point_checks_the_granted_prefix(
    monkeypatch: pytest.MonkeyPatch, entry_point: str
) -> None:
    """Each decorator, and the durable step, refuses a prefix not granted; takes a granted one."""
    monkeypatch.setenv(GRANTED_KEY_PREFIXES_ENV, "orders.create_order")

    with pytest.raises(IdempotencyKeyPrefixNotGrantedError, match=r"'orders\.create'"):
        _decorate_each("orders.create")[entry_point]()
    _decorate_each("orders.create_order")[entry_point]()
