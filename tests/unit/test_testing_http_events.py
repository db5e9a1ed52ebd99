"""The API Gateway event builders of `idempotent_lambda.testing`: events AWS would send, which
the HTTP adapter accepts, with each keyword where AWS puts it."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from idempotent_lambda import InMemoryPersistenceLayer
from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.testing import (
    FakeLambdaContext,
    api_gateway_http_event,
    api_gateway_rest_event,
)
from tests.events.http_events import header
from tests.unit._event_shapes import paths

EVENTS = Path(__file__).parents[1] / "events"
BUILDERS: dict[str, Callable[..., dict[str, Any]]] = {
    "apigateway-v1": api_gateway_rest_event,
    "apigateway-v2": api_gateway_http_event,
}
Runs = list[dict[str, Any]]


def request_fields(event: dict[str, Any]) -> set[str]:
    """Return an event's field paths, leaving out the names of headers (free-form)."""
    return {p for p in paths(event) if not p.startswith(("headers.", "multiValueHeaders."))}


def orders_handler(store: InMemoryPersistenceLayer, runs: Runs, **options: Any) -> Any:
    """Return an HTTP handler that records each event it runs for."""

    @idempotent_http(persistence_store=store, **options)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event)
        return {"statusCode": 201, "body": json.dumps({"order": len(runs)})}

    return handler


@pytest.mark.parametrize("shape", sorted(BUILDERS))
def test_the_default_event_has_the_fields_of_aws_sample(shape: str) -> None:
    """With no arguments, the event holds the fields of AWS's sample request (tests/events)."""
    sample = json.loads((EVENTS / f"{shape}.json").read_text())
    assert request_fields(sample) - {"cookies"} == request_fields(BUILDERS[shape]())


@pytest.mark.parametrize("shape", sorted(BUILDERS))
def test_the_default_event_runs_once_and_replays(
    shape: str, idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The adapter accepts the default event; sent again, it is a replay."""
    runs: Runs = []
    handler = orders_handler(idempotency_store, runs)
    event = BUILDERS[shape]()
    first = handler(event, lambda_context)
    retry = handler(event, lambda_context)
    assert 201 == first["statusCode"] == retry["statusCode"]
    assert first["body"] == retry["body"]
    assert ["true"] == header(retry, "Idempotent-Replayed")
    assert 1 == len(runs)


@pytest.mark.parametrize("shape", sorted(BUILDERS))
def test_each_call_is_a_new_request(
    shape: str, idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Two default events carry different keys and request ids: two runs."""
    runs: Runs = []
    handler = orders_handler(idempotency_store, runs)
    first, second = BUILDERS[shape](), BUILDERS[shape]()
    handler(first, lambda_context)
    handler(second, lambda_context)
    assert 2 == len(runs)
    assert first["requestContext"]["requestId"] != second["requestContext"]["requestId"]


@pytest.mark.parametrize("shape", sorted(BUILDERS))
def test_the_idempotency_key_is_a_header(
    shape: str, idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A given key is sent as the header; the same key replays; False sends none (400)."""
    runs: Runs = []
    handler = orders_handler(idempotency_store, runs)
    event = BUILDERS[shape](idempotency_key="k-1")
    assert ["k-1"] == header(event, "Idempotency-Key")
    handler(event, lambda_context)
    handler(BUILDERS[shape](idempotency_key="k-1"), lambda_context)
    assert 1 == len(runs)
    missing = BUILDERS[shape](idempotency_key=False)
    assert [] == header(missing, "Idempotency-Key")
    assert 400 == handler(missing, lambda_context)["statusCode"]


def test_rest_headers_are_single_and_multi_value() -> None:
    """REST API: `headers` holds the last value, `multiValueHeaders` all; names as given."""
    event = api_gateway_rest_event(
        idempotency_key="k-1", headers={"X-Tenant": "acme", "Accept": ["text/html", "*/*"]}
    )
    assert "acme" == event["headers"]["X-Tenant"]
    assert "*/*" == event["headers"]["Accept"]
    assert ["text/html", "*/*"] == event["multiValueHeaders"]["Accept"]
    assert ["k-1"] == event["multiValueHeaders"]["Idempotency-Key"]
    assert "k-1" == event["headers"]["Idempotency-Key"]


def test_http_headers_are_lower_cased_and_joined() -> None:
    """HTTP API: header names lower-cased, repeated values comma-joined."""
    event = api_gateway_http_event(
        idempotency_key="k-1", headers={"X-Tenant": "acme", "Accept": ["text/html", "*/*"]}
    )
    assert "acme" == event["headers"]["x-tenant"]
    assert "text/html,*/*" == event["headers"]["accept"]
    assert "k-1" == event["headers"]["idempotency-key"]
    assert all(name == name.lower() for name in event["headers"])


def test_a_header_replaces_the_default_in_any_case() -> None:
    """A header given in another case replaces the default one instead of doubling it."""
    event = api_gateway_rest_event(headers={"content-type": "text/plain"})
    assert ["text/plain"] == header(event, "Content-Type")


@pytest.mark.parametrize("shape", sorted(BUILDERS))
def test_bodies(shape: str) -> None:
    """A dict is sent as JSON text, bytes base64-encoded, a str as it is, None as no body."""
    build = BUILDERS[shape]
    as_json = build(body={"sku": "A1", "qty": 2})
    assert {"sku": "A1", "qty": 2} == json.loads(as_json["body"])
    assert as_json["isBase64Encoded"] is False
    binary = build(body=b"\x00\xff")
    assert b"\x00\xff" == base64.b64decode(binary["body"])
    assert binary["isBase64Encoded"] is True
    assert ["2"] == header(binary, "Content-Length")
    assert "sku=A1" == build(body="sku=A1")["body"]
    empty = build(method="GET", body=None)
    assert empty.get("body") is None
    assert [] == header(empty, "Content-Type")


def test_http_api_leaves_out_an_absent_body() -> None:
    """HTTP API events have no `body` field when there is no body."""
    assert "body" not in api_gateway_http_event(method="GET", body=None)


def test_rest_request_line() -> None:
    """REST API: method, path, resource, stage, query and path parameters where AWS puts them."""
    event = api_gateway_rest_event(
        method="PUT",
        path="/orders/42",
        route="/orders/{id}",
        query={"dry_run": "true", "tag": ["a", "b"]},
        path_parameters={"id": "42"},
        stage="dev",
    )
    assert ("PUT", "/orders/42", "/orders/{id}") == (
        event["httpMethod"],
        event["path"],
        event["resource"],
    )
    context = event["requestContext"]
    assert ("PUT", "/dev/orders/42", "/orders/{id}", "dev") == (
        context["httpMethod"],
        context["path"],
        context["resourcePath"],
        context["stage"],
    )
    assert {"dry_run": "true", "tag": "b"} == event["queryStringParameters"]
    assert {"dry_run": ["true"], "tag": ["a", "b"]} == event["multiValueQueryStringParameters"]
    assert {"id": "42"} == event["pathParameters"]


def test_http_request_line() -> None:
    """HTTP API: routeKey, rawPath, rawQueryString and the requestContext.http fields."""
    event = api_gateway_http_event(
        method="PUT",
        path="/orders/42",
        route="/orders/{id}",
        query={"q": "a b", "tag": ["x", "y"]},
        path_parameters={"id": "42"},
    )
    assert "PUT /orders/{id}" == event["routeKey"] == event["requestContext"]["routeKey"]
    assert "/orders/42" == event["rawPath"] == event["requestContext"]["http"]["path"]
    assert "PUT" == event["requestContext"]["http"]["method"]
    assert "q=a+b&tag=x&tag=y" == event["rawQueryString"]
    assert {"q": "a b", "tag": "x,y"} == event["queryStringParameters"]
    assert {"id": "42"} == event["pathParameters"]
    assert "$default" == api_gateway_http_event(route="$default")["routeKey"]


def test_claims_go_where_each_authorizer_puts_them() -> None:
    """REST: Cognito user pool `authorizer.claims`; HTTP API: `authorizer.jwt` with scopes."""
    rest = api_gateway_rest_event(claims={"sub": "alice"})
    assert {"claims": {"sub": "alice"}} == rest["requestContext"]["authorizer"]
    http = api_gateway_http_event(claims={"sub": "alice", "scope": "orders/write orders/read"})
    assert {
        "jwt": {
            "claims": {"sub": "alice", "scope": "orders/write orders/read"},
            "scopes": ["orders/write", "orders/read"],
        }
    } == http["requestContext"]["authorizer"]
    assert "authorizer" not in api_gateway_http_event()["requestContext"]


@pytest.mark.parametrize("shape", sorted(BUILDERS))
def test_claims_scope_the_key_by_caller(
    shape: str, idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The same key from two JWT subjects is two requests; from one subject, a replay."""
    runs: Runs = []
    handler = orders_handler(idempotency_store, runs)
    build = BUILDERS[shape]
    alice = handler(build(idempotency_key="k-1", claims={"sub": "alice"}), lambda_context)
    bob = handler(build(idempotency_key="k-1", claims={"sub": "bob"}), lambda_context)
    again = handler(build(idempotency_key="k-1", claims={"sub": "alice"}), lambda_context)
    assert 2 == len(runs)
    assert alice["body"] == again["body"] != bob["body"]


def test_a_lambda_authorizer_context(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """`authorizer=` sets the authorizer's output: a REST principal is a caller of its own."""
    runs: Runs = []
    handler = orders_handler(idempotency_store, runs)
    for principal in ("alice", "bob"):
        event = api_gateway_rest_event(idempotency_key="k-1", authorizer={"principalId": principal})
        assert principal == event["requestContext"]["authorizer"]["principalId"]
        handler(event, lambda_context)
    assert 2 == len(runs)


def test_http_lambda_authorizer_with_a_caller_expression(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """An HTTP API Lambda authorizer's context, read with `caller=`."""
    runs: Runs = []
    handler = orders_handler(
        idempotency_store, runs, caller="requestContext.authorizer.lambda.userId"
    )
    for user in ("alice", "bob", "alice"):
        event = api_gateway_http_event(
            idempotency_key="k-1", authorizer={"lambda": {"userId": user}}
        )
        handler(event, lambda_context)
    assert ["alice", "bob"] == [e["requestContext"]["authorizer"]["lambda"]["userId"] for e in runs]


@pytest.mark.parametrize("shape", sorted(BUILDERS))
def test_request_id_and_api(shape: str) -> None:
    """`request_id`, `api_id` and `stage` land in requestContext (and the Host header)."""
    event = BUILDERS[shape](request_id="req-1", api_id="abc123", stage="live")
    context = event["requestContext"]
    assert ("req-1", "abc123", "live") == (context["requestId"], context["apiId"], context["stage"])
    assert ["abc123.execute-api.us-east-1.amazonaws.com"] == header(event, "Host")
