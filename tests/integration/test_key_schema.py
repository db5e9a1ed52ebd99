"""A table keyed differently from its store fails loudly on first use, never mixing keys.

Real tables with the wrong key schema on the test server (issue 11, defect 2).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest
from botocore.awsrequest import AWSResponse

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent
from idempotent_lambda.exceptions import IdempotencyKeySchemaError
from idempotent_lambda.testing import FakeLambdaContext
from tests.integration.conftest import TableFactory

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient


@contextmanager
def operations(client: DynamoDBClient) -> Iterator[list[str]]:
    """Collect the DynamoDB operations ``client`` sends while the block runs."""
    sent: list[str] = []

    def note(request: Any, **_: Any) -> None:
        sent.append(request.headers["X-Amz-Target"].decode().rpartition(".")[2])

    client.meta.events.register("before-send.dynamodb", note)
    try:
        yield sent
    finally:
        client.meta.events.unregister("before-send.dynamodb", note)


class _Body:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._data


def deny_describe_table(client: DynamoDBClient) -> None:
    """Answer every ``DescribeTable`` of ``client`` with AccessDenied (an IAM policy without it)."""

    def deny(request: Any, **_: Any) -> AWSResponse:
        body = json.dumps(
            {"__type": "com.amazonaws.dynamodb.v20120810#AccessDeniedException", "message": "no"}
        ).encode()
        headers = {"Content-Type": "application/x-amz-json-1.0", "x-amzn-RequestId": "denied"}
        return AWSResponse(request.url, 400, headers, _Body(body))

    client.meta.events.register("before-send.dynamodb.DescribeTable", deny)


def orders_handler(store: DynamoDBPersistenceLayer, runs: list[int]) -> Any:
    """Return an idempotent handler that answers with the order it was given."""

    @idempotent(persistence_store=store, config=IdempotencyConfig(event_key_jmespath="order"))
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event["order"])
        return {"order": event["order"]}

    return handler


def test_a_sort_key_on_a_table_keyed_only_on_id_fails_on_first_use(
    make_table: TableFactory, dynamodb_client: DynamoDBClient
) -> None:
    """``sort_key_attr`` on a hash-only table: the first call raises, naming both schemas."""
    store = DynamoDBPersistenceLayer(make_table(), sort_key_attr="sk", boto3_client=dynamodb_client)
    runs: list[int] = []
    handler = orders_handler(store, runs)

    with operations(dynamodb_client) as first, pytest.raises(IdempotencyKeySchemaError) as raised:
        handler({"order": 1}, FakeLambdaContext())
    with operations(dynamodb_client) as second, pytest.raises(IdempotencyKeySchemaError):
        handler({"order": 2}, FakeLambdaContext())

    message = str(raised.value)
    assert "keyed on id (HASH, type S)" in message
    assert "sort_key_attr='sk'" in message
    assert ([], ["DescribeTable"], []) == (runs, first, second)  # checked once, then remembered


def test_without_describe_table_another_keys_result_is_never_replayed(
    make_table: TableFactory, dynamodb_client: DynamoDBClient
) -> None:
    """The reported case, with DescribeTable denied: order 2 never gets order 1's result."""
    table = make_table()
    deny_describe_table(dynamodb_client)
    store = DynamoDBPersistenceLayer(table, sort_key_attr="sk", boto3_client=dynamodb_client)
    runs: list[int] = []
    handler = orders_handler(store, runs)

    assert {"order": 1} == handler({"order": 1}, FakeLambdaContext())
    with pytest.raises(IdempotencyKeySchemaError, match="another idempotency key"):
        handler({"order": 2}, FakeLambdaContext())
    assert [1] == runs


def test_no_sort_key_on_a_table_with_one_fails_on_first_use(
    make_table: TableFactory, dynamodb_client: DynamoDBClient
) -> None:
    """No ``sort_key_attr`` on a hash+range table: DynamoDB's refusal, explained, then cached."""
    store = DynamoDBPersistenceLayer(make_table(sort_key_attr="sk"), boto3_client=dynamodb_client)
    runs: list[int] = []
    handler = orders_handler(store, runs)

    with operations(dynamodb_client) as first, pytest.raises(IdempotencyKeySchemaError) as raised:
        handler({"order": 1}, FakeLambdaContext())
    with operations(dynamodb_client) as second, pytest.raises(IdempotencyKeySchemaError):
        handler({"order": 1}, FakeLambdaContext())

    message = str(raised.value)
    assert "keyed on id (HASH, type S), sk (RANGE, type S)" in message
    assert "no sort_key_attr" in message
    assert ([], ["PutItem", "DescribeTable"], []) == (runs, first, second)


def test_without_describe_table_dynamodbs_own_refusal_is_explained(
    make_table: TableFactory, dynamodb_client: DynamoDBClient
) -> None:
    """With DescribeTable denied, a key DynamoDB refuses is still reported as a key mismatch."""
    table = make_table()
    deny_describe_table(dynamodb_client)
    store = DynamoDBPersistenceLayer(table, sort_key_attr="sk", boto3_client=dynamodb_client)

    with pytest.raises(IdempotencyKeySchemaError, match="does not match the schema") as raised:
        store.get("orders#1")
    assert "sort_key_attr='sk'" in str(raised.value)


def test_a_composite_store_on_a_matching_table_checks_it_once(
    make_table: TableFactory, dynamodb_client: DynamoDBClient
) -> None:
    """The right composite table: one DescribeTable on first use, then the usual round trips."""
    store = DynamoDBPersistenceLayer(
        make_table(sort_key_attr="sk"), sort_key_attr="sk", boto3_client=dynamodb_client
    )
    runs: list[int] = []
    handler = orders_handler(store, runs)

    with operations(dynamodb_client) as first:
        handler({"order": 1}, FakeLambdaContext())
    with operations(dynamodb_client) as second:
        handler({"order": 2}, FakeLambdaContext())

    assert ["DescribeTable", "PutItem", "PutItem"] == first
    assert ["PutItem", "PutItem"] == second
    assert [1, 2] == runs
