"""`idempotent_http` against a DynamoDB-compatible server: real conditional writes, every shape."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.testing import FakeLambdaContext
from tests.events import http_events as ev


@pytest.fixture(params=ev.SHAPES)
def shape(request: pytest.FixtureRequest) -> str:
    """Every event shape the adapter accepts."""
    return str(request.param)


def items(client: Any, table: str) -> list[dict[str, Any]]:
    """Return every item of ``table``."""
    return list(client.scan(TableName=table, ConsistentRead=True)["Items"])


def test_replay_end_to_end(
    shape: str, dynamodb_store: Any, dynamodb_client: Any, idempotency_table: str
) -> None:
    """First request stores a COMPLETED item; the retry replays it, header added."""
    runs: list[int] = []

    @idempotent_http(persistence_store=dynamodb_store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(1)
        return {
            "statusCode": 201,
            "headers": {"Location": "/orders/1"},
            "multiValueHeaders": {"Set-Cookie": ["a=1", "b=2"], "Vary": ["Origin"]},
            "body": json.dumps({"id": 1}),
        }

    first = handler(ev.make_event(shape, key="e2e-order-key-one"), FakeLambdaContext(30_000))
    second = handler(ev.make_event(shape, key="e2e-order-key-one"), FakeLambdaContext(30_000))
    assert 1 == len(runs)
    assert first["body"] == second["body"]
    assert 201 == second["statusCode"]
    assert ["/orders/1"] == ev.header(second, "location")
    assert ["a=1", "b=2"] == first["multiValueHeaders"]["Set-Cookie"]
    assert {"Vary": ["Origin"]} == {
        name: values
        for name, values in second["multiValueHeaders"].items()
        if name != "Idempotent-Replayed"
    }  # cookies are not stored
    assert ["true"] == ev.header(second, "idempotent-replayed")
    (item,) = items(dynamodb_client, idempotency_table)
    assert "COMPLETED" == item["status"]["S"]
    assert "e2e-order-key-one" not in json.dumps(item)  # only the hash of the key is stored
    assert "a=1" not in json.dumps(item)
    assert "validation" in item


def test_different_request_same_key_is_a_422(shape: str, dynamodb_store: Any) -> None:
    """The stored fingerprint is compared on DynamoDB's answer to the failed claim."""

    @idempotent_http(persistence_store=dynamodb_store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": 200, "body": "ok"}

    handler(ev.make_event(shape, key="k", body='{"a": 1}'), None)
    response = handler(ev.make_event(shape, key="k", body='{"a": 2}'), None)
    assert 422 == response["statusCode"]
    assert 422 == ev.problem(response)["status"]


@pytest.mark.parametrize(
    ("shape", "source"),
    [
        pytest.param(shape, source, id=f"{shape}-{source}")
        for shape in ev.SHAPES
        for source in ev.CALLER_SOURCES[shape]
    ],
)
def test_two_callers_same_key_never_cross_replay(
    dynamodb_store: Any, dynamodb_client: Any, idempotency_table: str, shape: str, source: str
) -> None:
    """Alice and Bob both send key ``k``: two items, each gets only their own response."""

    @idempotent_http(persistence_store=dynamodb_store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        caller = json.loads(event["body"])["who"]
        return {"statusCode": 201, "body": f"for {caller}"}

    def send(who: str) -> dict[str, Any]:
        event = ev.make_event(shape, key="k", body=json.dumps({"who": who}), caller=(source, who))
        response: dict[str, Any] = handler(event, None)
        return response

    assert "for alice" == send("alice")["body"]
    assert "for bob" == send("bob")["body"]
    assert "for alice" == send("alice")["body"]
    assert "for bob" == send("bob")["body"]
    assert 2 == len(items(dynamodb_client, idempotency_table))


def test_without_caller_identity_the_route_scope_is_shared(shape: str, dynamodb_store: Any) -> None:
    """No identity (ALB, anonymous APIs): the same key and request replays for anyone."""

    @idempotent_http(persistence_store=dynamodb_store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": 201, "body": "made"}

    handler(ev.make_event(shape, key="k"), None)
    assert ["true"] == ev.header(
        handler(ev.make_event(shape, key="k"), None), "idempotent-replayed"
    )


#: The slow request's lease: a loaded machine cannot make the duplicate arrive after it ends.
LEASE_MS = 120_000


def test_409_with_retry_after_while_a_slow_handler_runs(shape: str, dynamodb_store: Any) -> None:
    """A duplicate during a slow first request gets 409 + Retry-After; afterwards, the replay."""
    started, release = threading.Event(), threading.Event()
    runs: list[int] = []

    @idempotent_http(persistence_store=dynamodb_store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(1)
        started.set()
        assert release.wait(60)
        return {"statusCode": 201, "body": "slow"}

    results: list[dict[str, Any]] = []
    slow = threading.Thread(
        target=lambda: results.append(
            handler(ev.make_event(shape, key="slow"), FakeLambdaContext(LEASE_MS))
        )
    )
    slow.start()
    try:
        assert started.wait(60)
        duplicate = handler(ev.make_event(shape, key="slow"), FakeLambdaContext(LEASE_MS))
    finally:
        release.set()
        slow.join(60)
    assert 409 == duplicate["statusCode"]
    (retry_after,) = ev.header(duplicate, "Retry-After")
    assert 1 <= int(retry_after) <= LEASE_MS // 1000
    assert 409 == ev.problem(duplicate)["status"]
    assert 201 == results[0]["statusCode"]
    replay = handler(ev.make_event(shape, key="slow"), FakeLambdaContext(LEASE_MS))
    assert "slow" == replay["body"]
    assert ["true"] == ev.header(replay, "idempotent-replayed")
    assert 1 == len(runs)


def test_5xx_is_released_in_the_table(
    shape: str, dynamodb_store: Any, dynamodb_client: Any, idempotency_table: str
) -> None:
    """A 5xx leaves no item behind, so the retry runs the handler again."""
    statuses = [502, 200]

    @idempotent_http(persistence_store=dynamodb_store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": statuses.pop(0), "body": ""}

    assert 502 == handler(ev.make_event(shape, key="k"), None)["statusCode"]
    assert [] == items(dynamodb_client, idempotency_table)
    assert 200 == handler(ev.make_event(shape, key="k"), None)["statusCode"]
    assert 1 == len(items(dynamodb_client, idempotency_table))
