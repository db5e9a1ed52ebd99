"""`idempotent_http`: the caller of every authenticated setup, ``caller=``, ``caller_scope``, and
failing closed when an authenticated request names no caller."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.exceptions import IdempotencyConfigError
from tests.events import http_events as ev

MAPPED = [
    pytest.param(shape, setup, id=f"{shape}-{setup}")
    for shape in ev.SHAPES
    for setup in ev.CALLER_SOURCES[shape]
]
UNMAPPED = [
    pytest.param(shape, setup, id=f"{shape}-{setup}")
    for shape, setups in ev.UNMAPPED_SETUPS.items()
    for setup in setups
]


@pytest.fixture(params=ev.SHAPES)
def shape(request: pytest.FixtureRequest) -> str:
    """Every event shape the adapter accepts."""
    return str(request.param)


class Handler:
    """A decorated handler that counts runs and answers with the run number."""

    def __init__(self, store: Any, **options: Any) -> None:
        self.runs = 0

        @idempotent_http(persistence_store=store, **options)
        def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
            self.runs += 1
            return {"statusCode": 201, "body": str(self.runs)}

        self.handler = handler

    def __call__(self, event: Any) -> dict[str, Any]:
        response: dict[str, Any] = self.handler(event, None)
        return response


@pytest.mark.parametrize(("shape", "setup"), MAPPED)
def test_two_callers_of_one_setup_never_share_a_response(
    idempotency_store: Any, shape: str, setup: str
) -> None:
    """Same key, same body, another caller of the same setup: a run of their own."""
    handler = Handler(idempotency_store)
    alice = handler(ev.make_event(shape, key="k", caller=(setup, "alice")))
    bob = handler(ev.make_event(shape, key="k", caller=(setup, "bob")))
    assert ("1", "2") == (alice["body"], bob["body"])
    assert "1" == handler(ev.make_event(shape, key="k", caller=(setup, "alice")))["body"]


@pytest.mark.parametrize(("shape", "setup"), UNMAPPED)
def test_an_http_api_lambda_authorizer_is_refused_without_caller(
    idempotency_store: Any, shape: str, setup: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Its context names no caller the adapter knows: 500, one ERROR line, the handler not run;
    a second caller is refused too, never handed the first one's response."""
    handler = Handler(idempotency_store)
    with caplog.at_level(logging.INFO, logger="idempotent_lambda"):
        first = handler(ev.make_event(shape, key="k", caller=(setup, "alice")))
        second = handler(ev.make_event(shape, key="k", caller=(setup, "bob")))
    assert (500, 500) == (first["statusCode"], second["statusCode"])
    assert 500 == ev.problem(first)["status"]
    assert 0 == handler.runs
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert 2 == len(errors)
    message = errors[0].getMessage()
    assert "requestContext.authorizer.lambda" in message
    assert "caller=" in message
    assert "alice" not in caplog.text


def test_caller_expression_names_the_lambda_authorizers_field(idempotency_store: Any) -> None:
    """``caller=`` as JMESPath reads the authorizer's context: callers are separated again."""
    handler = Handler(idempotency_store, caller="requestContext.authorizer.lambda.userId")
    alice = ev.make_event("apigateway-v2", key="k", caller=("lambda-authorizer", "alice"))
    bob = ev.make_event("apigateway-v2", key="k", caller=("lambda-authorizer", "bob"))
    assert ("1", "2") == (handler(alice)["body"], handler(bob)["body"])
    assert "1" == handler(alice)["body"]


def test_caller_callable_is_used_and_none_falls_back_to_the_platform(
    idempotency_store: Any,
) -> None:
    """A callable returning None leaves the caller to the platform's fields (here a JWT sub)."""
    seen: list[str] = []

    def tenant_user(event: dict[str, Any]) -> str | None:
        context = event["requestContext"].get("authorizer", {}).get("lambda")
        seen.append("called")
        return None if context is None else f"{context['tenant']}/{context['userId']}"

    handler = Handler(idempotency_store, caller=tenant_user)
    handler(ev.make_event("apigateway-v2", key="k", caller=("lambda-authorizer", "alice")))
    bob = handler(ev.make_event("apigateway-v2", key="k", caller=("lambda-authorizer", "bob")))
    assert "2" == bob["body"]
    jwt_alice = handler(ev.make_event("apigateway-v2", key="k", caller=("jwt", "alice")))
    assert "3" == jwt_alice["body"]  # the JWT caller "alice" is not the tenant user "acme/alice"
    assert 3 == len(seen)


@pytest.mark.parametrize(
    "caller", [lambda event: 1 / 0, lambda event: ["not", "a", "string"], "requestContext"]
)
def test_a_caller_option_that_fails_fails_closed(
    idempotency_store: Any, caller: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A callable that raises or an expression with an unusable result: 500, not shared."""
    handler = Handler(idempotency_store, caller=caller)
    with caplog.at_level(logging.ERROR, logger="idempotent_lambda"):
        response = handler(ev.make_event("apigateway-v2", key="k"))
    assert 500 == response["statusCode"]
    assert 0 == handler.runs
    assert "caller=" in caplog.records[-1].getMessage()


@pytest.mark.parametrize("caller", ["requestContext.[", 42])
def test_an_unusable_caller_option_is_refused_at_decoration(
    idempotency_store: Any, caller: Any
) -> None:
    """A JMESPath expression that does not compile, or neither a string nor a callable."""
    with pytest.raises(IdempotencyConfigError, match="caller"):
        Handler(idempotency_store, caller=caller)


def test_caller_scope_is_checked_at_decoration(idempotency_store: Any) -> None:
    """Only "caller" and "shared"; ``caller=`` with "shared" would be ignored, so it is refused."""
    with pytest.raises(IdempotencyConfigError, match="caller_scope"):
        Handler(idempotency_store, caller_scope="per-user")
    with pytest.raises(IdempotencyConfigError, match="caller"):
        Handler(idempotency_store, caller="x", caller_scope="shared")


def test_shared_scope_is_an_explicit_opt_in(idempotency_store: Any) -> None:
    """``caller_scope="shared"``: an unmappable authenticated request runs, and every caller
    shares one key space (the documented consequence)."""
    handler = Handler(idempotency_store, caller_scope="shared")
    alice = ev.make_event("apigateway-v2", key="k", caller=("lambda-authorizer", "alice"))
    bob = ev.make_event("apigateway-v2", key="k", caller=("jwt", "bob"))
    assert "1" == handler(alice)["body"]
    assert "1" == handler(bob)["body"]
    assert 1 == handler.runs


@pytest.mark.parametrize(
    ("shape", "edit", "field"),
    [
        (
            "apigateway-v2",
            lambda e: e["requestContext"].update(
                authorizer={"jwt": {"claims": {"iss": "https://issuer"}, "scopes": None}}
            ),
            "requestContext.authorizer.jwt.claims.sub",
        ),
        (
            "apigateway-v1",
            lambda e: e["requestContext"].update(authorizer={"claims": {"email": "a@b.c"}}),
            "requestContext.authorizer.claims.sub",
        ),
        (
            "apigateway-v1",
            lambda e: e["requestContext"].update(authorizer={"tenant": "acme"}),
            "requestContext.authorizer.principalId",
        ),
        (
            "function-url",
            lambda e: e["requestContext"].update(authorizer={"iam": {"accountId": "1"}}),
            "requestContext.authorizer.iam.userArn",
        ),
        (
            "apigateway-v2",
            lambda e: e["requestContext"].update(
                authentication={"clientCert": {"issuerDN": "CN=CA"}}
            ),
            "requestContext.authentication.clientCert.subjectDN",
        ),
        (
            "alb",
            lambda e: e["headers"].update({"x-amzn-oidc-data": "eyJ.eyJ.sig"}),
            "x-amzn-oidc-identity",
        ),
        (
            "alb-multivalue",
            lambda e: e["multiValueHeaders"].update({"x-amzn-oidc-identity": ["alice", "bob"]}),
            "x-amzn-oidc-identity",
        ),
    ],
)
def test_an_authentication_context_without_a_caller_fails_closed(
    idempotency_store: Any, shape: str, edit: Any, field: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Each setup's missing field is named in the ERROR line; the handler does not run."""
    event = ev.make_event(shape, key="k")
    edit(event)
    handler = Handler(idempotency_store)
    with caplog.at_level(logging.ERROR, logger="idempotent_lambda"):
        response = handler(event)
    assert 500 == response["statusCode"]
    assert 0 == handler.runs
    assert field in caplog.records[-1].getMessage()


def test_unauthenticated_requests_stay_key_scoped(shape: str, idempotency_store: Any) -> None:
    """No authentication context: one scope per route for everyone, as documented."""
    handler = Handler(idempotency_store)
    handler(ev.make_event(shape, key="k"))
    assert "1" == handler(ev.make_event(shape, key="k"))["body"]


def test_the_client_certificate_scope_covers_issuer_subject_and_serial(
    idempotency_store: Any,
) -> None:
    """A new serial number (a reissued or another certificate) of one subject is another caller."""
    handler = Handler(idempotency_store)
    first = ev.make_event("apigateway-v2", key="k", caller=("mtls", "partner"))
    handler(first)
    reissued = json.loads(json.dumps(first))
    reissued["requestContext"]["authentication"]["clientCert"]["serialNumber"] = "ff:ee"
    assert "2" == handler(reissued)["body"]


@pytest.mark.parametrize(
    ("field", "value"), [("apiId", "other-api"), ("stage", "dev"), ("domainName", "x.example")]
)
def test_api_and_stage_are_part_of_the_scope(
    idempotency_store: Any, field: str, value: str
) -> None:
    """A key used on one API or stage never replays on another (the domain counts only when
    the event names no apiId)."""
    handler = Handler(idempotency_store)
    handler(ev.make_event("apigateway-v1", key="k"))
    other = ev.make_event("apigateway-v1", key="k")
    other["requestContext"][field] = value
    expected = "1" if field == "domainName" else "2"
    assert expected == handler(other)["body"]
    del other["requestContext"]["apiId"]
    assert handler(other)["body"] not in ("1",)
