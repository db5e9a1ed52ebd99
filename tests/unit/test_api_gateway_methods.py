"""`idempotent_http`'s ``methods``: which requests the key applies to; the rest pass through."""

from __future__ import annotations

from typing import Any

import pytest

from idempotent_lambda import IdempotencyConfig, IdempotencyConfigError, InMemoryPersistenceLayer
from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.testing import FakeLambdaContext
from idempotent_lambda.transaction import current_transaction
from tests.events import http_events as ev
from tests.unit._doubles import Decisions


def counting_handler(store: InMemoryPersistenceLayer, **options: Any) -> tuple[Any, list[str]]:
    """Return a decorated handler answering 200, and the methods it ran for."""
    runs: list[str] = []

    @idempotent_http(persistence_store=store, **options)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event.get("httpMethod") or event["requestContext"]["http"]["method"])
        return {"statusCode": 200, "body": "ok"}

    return handler, runs


@pytest.mark.parametrize("shape", ev.SHAPES)
@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS", "TRACE", "get", "Options"])
def test_safe_methods_pass_through_without_a_key_by_default(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
    shape: str,
    method: str,
) -> None:
    """GET/HEAD/OPTIONS/TRACE (a CORS preflight...) need no key, store nothing, decide nothing."""
    handler, runs = counting_handler(
        idempotency_store, config=IdempotencyConfig(decision_hook=decisions)
    )
    event = ev.make_event(shape, method=method)

    responses = [handler(event, lambda_context), handler(event, lambda_context)]

    assert [200, 200] == [r["statusCode"] for r in responses]
    assert 2 == len(runs)
    assert 0 == len(idempotency_store)
    assert [] == decisions.outcomes
    assert all(not ev.header(r, "Idempotent-Replayed") for r in responses)


@pytest.mark.parametrize("method", ["GET", "OPTIONS"])
def test_safe_methods_pass_through_even_with_a_key(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext, method: str
) -> None:
    """A key sent with a GET is ignored: each GET runs the handler."""
    handler, runs = counting_handler(idempotency_store)
    event = ev.make_event("apigateway-v2", method=method, key="k1")

    handler(event, lambda_context)
    handler(event, lambda_context)

    assert 2 == len(runs)
    assert 0 == len(idempotency_store)


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "post", "PURGE"])
def test_other_methods_need_a_key_by_default(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext, method: str
) -> None:
    """Every method that is not safe is covered: no key is a 400, a key deduplicates."""
    handler, runs = counting_handler(idempotency_store)

    missing = handler(ev.make_event("apigateway-v1", method=method), lambda_context)
    first = handler(ev.make_event("apigateway-v1", method=method, key="k1"), lambda_context)
    again = handler(ev.make_event("apigateway-v1", method=method, key="k1"), lambda_context)

    assert (400, 200, 200) == (missing["statusCode"], first["statusCode"], again["statusCode"])
    assert ["true"] == ev.header(again, "Idempotent-Replayed")
    assert 1 == len(runs)


def test_methods_narrows_the_covered_methods(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """``methods=("post", "PATCH")`` (any case): PUT and DELETE pass through, POST needs a key."""
    handler, runs = counting_handler(idempotency_store, methods=("post", "PATCH"))

    statuses = [
        handler(ev.make_event("apigateway-v2", method=method), lambda_context)["statusCode"]
        for method in ("PUT", "DELETE", "POST", "PATCH", "GET")
    ]

    assert [200, 200, 400, 400, 200] == statuses
    assert ["PUT", "DELETE", "GET"] == runs


def test_methods_can_cover_a_safe_method(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A safe method named in ``methods`` is covered like any other."""
    handler, runs = counting_handler(idempotency_store, methods=["GET"])

    assert 400 == handler(ev.make_event("alb", method="GET"), lambda_context)["statusCode"]
    assert 200 == handler(ev.make_event("alb", method="POST"), lambda_context)["statusCode"]
    assert ["POST"] == runs


def test_a_passed_through_request_is_not_read_at_all(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A GET with a body that is not valid base64 reaches the handler instead of a 400."""
    handler, runs = counting_handler(idempotency_store)
    event = ev.make_event("apigateway-v1", method="GET")
    event["body"], event["isBase64Encoded"] = "not base64!", True

    assert 200 == handler(event, lambda_context)["statusCode"]
    assert ["GET"] == runs


def test_an_unreadable_method_is_still_a_400(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """With no readable method the request is malformed, as before."""
    handler, runs = counting_handler(idempotency_store)
    event = ev.make_event("apigateway-v1", key="k1")
    event["httpMethod"] = 7

    assert 400 == handler(event, lambda_context)["statusCode"]
    assert [] == runs


def test_passed_through_requests_commit_their_transaction(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """`current_transaction` works for a passed-through method; its writes commit."""

    @idempotent_http(persistence_store=idempotency_store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        current_transaction().put("audit", {"pk": "seen"})
        return {"statusCode": 200, "body": ""}

    handler(ev.make_event("function-url", method="GET"), lambda_context)

    assert [{"S": "seen"}] == [w["Put"]["Item"]["pk"] for w in idempotency_store.committed_writes]


@pytest.mark.parametrize(
    "methods", ["POST", [], (), ["POST", ""], ["POST", 1], ["PO ST"], 42, frozenset({None})]
)
def test_unusable_methods_are_refused_at_decoration_time(
    idempotency_store: InMemoryPersistenceLayer, methods: Any
) -> None:
    """A bare string, an empty collection or a non-token name is an `IdempotencyConfigError`."""
    with pytest.raises(IdempotencyConfigError, match="methods"):
        idempotent_http(persistence_store=idempotency_store, methods=methods)
