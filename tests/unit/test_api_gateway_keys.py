"""`idempotent_http`: the key header, scoping, fingerprint, JMESPath keys, malformed events."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from idempotent_lambda import IdempotencyConfig
from idempotent_lambda.adapters.api_gateway import idempotent_http
from tests.events import http_events as ev


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


def is_replay(response: dict[str, Any]) -> bool:
    """Tell whether ``response`` is a replay."""
    return ["true"] == ev.header(response, "idempotent-replayed")


# --- the header -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["Idempotency-Key", "idempotency-key", "IDEMPOTENCY-KEY", "iDeMpOtEnCy-KeY"]
)
def test_header_name_matches_in_any_case(shape: str, idempotency_store: Any, name: str) -> None:
    """The header is found whatever its case, and names the same record."""
    handler = Handler(idempotency_store)
    handler(ev.make_event(shape, key="k-1"))
    assert is_replay(handler(ev.make_event(shape, key="k-1", header_name=name)))


@pytest.mark.parametrize(
    ("sent", "same_as"),
    [
        ('"k-1"', "k-1"),
        ('  "k-1"\t', "k-1"),
        ("  k-1  ", "k-1"),
        ('"a\\"b"', 'a"b'),
        ('"a\\\\b"', "a\\b"),
        ('"k-1";v=1', "k-1"),
        ('"k-1";a;b="x;y"', "k-1"),
        ('"with space"', "with space"),
    ],
)
def test_structured_field_strings_are_unquoted(
    shape: str, idempotency_store: Any, sent: str, same_as: str
) -> None:
    """A quoted Structured-Field string names the same record as its bare content."""
    handler = Handler(idempotency_store)
    handler(ev.make_event(shape, key=same_as))
    assert is_replay(handler(ev.make_event(shape, key=sent)))
    assert 1 == handler.runs


@pytest.mark.parametrize(
    "key",
    [
        "",
        "   ",
        '""',
        "x" * 256,
        '"' + "x" * 256 + '"',
        "tab\tinside",
        "nul\x00",
        "bell\x07",
        "del\x7f",
        "caf\u00e9",
        "emoji\U0001f600",
        '"unterminated',
        '"bad\\escape"',
        '"trailing" junk',
        '"ctl\x01"',
        "x" * 10_000,
    ],
)
def test_invalid_keys_are_a_400(shape: str, idempotency_store: Any, key: str) -> None:
    """Empty, over 255, non-printable or non-ASCII keys and broken quoting: 400 problem."""
    handler = Handler(idempotency_store)
    response = handler(ev.make_event(shape, key=key))
    assert 400 == response["statusCode"]
    problem = ev.problem(response)
    assert "Idempotency-Key is invalid" == problem["title"]
    assert key.strip() not in problem["detail"] or not key.strip()
    assert 0 == handler.runs


@pytest.mark.parametrize("key", ["x", "x" * 255, " !~", "550e8400-e29b-41d4-a716-446655440000"])
def test_valid_keys_are_accepted(shape: str, idempotency_store: Any, key: str) -> None:
    """1 to 255 printable ASCII characters are a key."""
    handler = Handler(idempotency_store)
    assert 201 == handler(ev.make_event(shape, key=key))["statusCode"]
    assert is_replay(handler(ev.make_event(shape, key=key)))


def test_repeated_header_with_different_values_is_a_400(shape: str, idempotency_store: Any) -> None:
    """Two different keys for one request are ambiguous: 400."""
    event = ev.make_event(shape, key="a")
    if shape in ev.MULTI_VALUE_SHAPES:
        event["multiValueHeaders"]["Idempotency-Key"] = ["a", "b"]
    else:
        event["headers"]["IDEMPOTENCY-KEY"] = "b"
    handler = Handler(idempotency_store)
    assert 400 == handler(event)["statusCode"]


def test_repeated_header_with_the_same_value_is_one_key(shape: str, idempotency_store: Any) -> None:
    """The same key sent twice (or in both header maps) is still one key."""
    event = ev.make_event(shape, key="a")
    if shape in ev.MULTI_VALUE_SHAPES:
        event["multiValueHeaders"]["Idempotency-Key"] = ["a", '"a"']
    else:
        event["headers"]["IDEMPOTENCY-KEY"] = '"a"'
    handler = Handler(idempotency_store)
    assert 201 == handler(event)["statusCode"]


def test_custom_header_name(shape: str, idempotency_store: Any) -> None:
    """``header_name`` picks another header; problem titles use its name."""
    handler = Handler(idempotency_store, header_name="X-Request-Key")
    handler(ev.make_event(shape, key="k", header_name="x-request-key"))
    assert is_replay(handler(ev.make_event(shape, key="k", header_name="X-REQUEST-KEY")))
    missing = handler(ev.make_event(shape, key="k"))
    assert "X-Request-Key is missing" == ev.problem(missing)["title"]


# --- scope ------------------------------------------------------------------------------------


def caller_cases() -> list[Any]:
    """Every (shape, identity source) pair an event can carry."""
    return [
        pytest.param(shape, source, id=f"{shape}-{source}")
        for shape in ev.SHAPES
        for source in ev.CALLER_SOURCES[shape]
    ]


@pytest.mark.parametrize(("shape", "source"), caller_cases())
def test_two_callers_with_the_same_key_never_see_each_other(
    idempotency_store: Any, shape: str, source: str
) -> None:
    """The caller is part of the scope: each identity source separates callers."""
    handler = Handler(idempotency_store)
    alice = handler(ev.make_event(shape, key="k", caller=(source, "alice")))
    bob = handler(ev.make_event(shape, key="k", caller=(source, "bob")))
    assert ("1", "2") == (alice["body"], bob["body"])
    assert not is_replay(bob)
    assert "1" == handler(ev.make_event(shape, key="k", caller=(source, "alice")))["body"]
    assert "2" == handler(ev.make_event(shape, key="k", caller=(source, "bob")))["body"]


def test_without_a_caller_the_scope_is_shared(shape: str, idempotency_store: Any) -> None:
    """No identity in the event (anonymous API, ALB): one scope per route for everyone."""
    handler = Handler(idempotency_store)
    handler(ev.make_event(shape, key="k"))
    assert is_replay(handler(ev.make_event(shape, key="k")))


@pytest.mark.parametrize(("shape", "source"), caller_cases())
def test_an_identified_caller_does_not_share_the_anonymous_scope(
    idempotency_store: Any, shape: str, source: str
) -> None:
    """A key used anonymously and by a caller names two records."""
    handler = Handler(idempotency_store)
    handler(ev.make_event(shape, key="k"))
    assert not is_replay(handler(ev.make_event(shape, key="k", caller=(source, "alice"))))


@pytest.mark.parametrize("shape", ["apigateway-v1", "apigateway-v2", "function-url"])
def test_the_cognito_identity_id_is_read_before_the_role_arn(
    idempotency_store: Any, shape: str
) -> None:
    """Identity-pool users share one role ARN; their identity id tells them apart, and the same
    identity under another role session replays."""
    handler = Handler(idempotency_store)
    alice = ev.make_event(shape, key="k", caller=("iam-cognito-identity", "us-east-1:alice"))
    handler(alice)
    bob = ev.make_event(shape, key="k", caller=("iam-cognito-identity", "us-east-1:bob"))
    assert not is_replay(handler(bob))
    again = ev.make_event(shape, key="k", caller=("iam-cognito-identity", "us-east-1:alice"))
    holder = again["requestContext"]
    iam = holder["identity"] if shape == "apigateway-v1" else holder["authorizer"]["iam"]
    iam["userArn"] = iam["userArn"].replace("CognitoIdentityCredentials", "other-session")
    assert is_replay(handler(again))


def test_identity_sources_do_not_collide(idempotency_store: Any) -> None:
    """The same id from two sources (a sub and an API key id) names two scopes."""
    handler = Handler(idempotency_store)
    handler(ev.make_event("apigateway-v1", key="k", caller=("cognito-user-pool", "same")))
    assert not is_replay(
        handler(ev.make_event("apigateway-v1", key="k", caller=("api-key", "same")))
    )


def test_method_is_part_of_the_scope(shape: str, idempotency_store: Any) -> None:
    """The same key on POST and PUT names two records."""
    handler = Handler(idempotency_store)
    handler(ev.make_event(shape, key="k", method="POST"))
    put = handler(ev.make_event(shape, key="k", method="PUT"))
    assert not is_replay(put)
    assert 2 == handler.runs
    assert is_replay(handler(ev.make_event(shape, key="k", method="PUT")))


def test_route_is_part_of_the_scope(shape: str, idempotency_store: Any) -> None:
    """The same key on two routes names two records."""
    handler = Handler(idempotency_store)
    handler(ev.make_event(shape, key="k", path="/orders"))
    assert not is_replay(handler(ev.make_event(shape, key="k", path="/refunds")))
    assert 2 == handler.runs


def test_path_under_one_route_template(shape: str, idempotency_store: Any) -> None:
    """Two paths of one route template (v1 resource, v2 routeKey) share a scope but not a
    fingerprint: 422. Function URL and ALB scope by path, so they are two records."""
    handler = Handler(idempotency_store)
    handler(ev.make_event(shape, key="k", path="/orders/1", route="/orders/{id}"))
    second = handler(ev.make_event(shape, key="k", path="/orders/2", route="/orders/{id}"))
    if shape in ("apigateway-v1", "apigateway-v2"):
        assert 422 == second["statusCode"]
    else:
        assert 201 == second["statusCode"]
        assert not is_replay(second)


def test_catch_all_routes_scope_by_path(shape: str, idempotency_store: Any) -> None:
    """A ``$default`` route (v1 resource or v2 routeKey) falls back to the path."""
    handler = Handler(idempotency_store)
    first = ev.make_event(shape, key="k", path="/a")
    second = ev.make_event(shape, key="k", path="/b")
    for event in (first, second):
        if shape == "apigateway-v1":
            event["resource"] = "$default"
        elif shape == "apigateway-v2":
            event["routeKey"] = "$default"
    handler(first)
    assert not is_replay(handler(second))


def test_key_prefix_separates_functions(shape: str, idempotency_store: Any) -> None:
    """Two handlers with different prefixes never share records."""
    one = Handler(idempotency_store, key_prefix="one")
    two = Handler(idempotency_store, key_prefix="two")
    one(ev.make_event(shape, key="k"))
    assert not is_replay(two(ev.make_event(shape, key="k")))
    assert {"one", "two"} == {k.split("#")[0] for k in idempotency_store._records}


# --- fingerprint ------------------------------------------------------------------------------


def test_headers_and_request_ids_are_not_fingerprinted(shape: str, idempotency_store: Any) -> None:
    """A retry with other headers, trace and request ids is still a replay."""
    handler = Handler(idempotency_store)
    handler(ev.make_event(shape, key="k", headers={"User-Agent": "a"}, request_id="req-1"))
    retry = ev.make_event(
        shape, key="k", headers={"User-Agent": "b", "X-Extra": "1"}, request_id="req-2"
    )
    assert is_replay(handler(retry))


def test_body_is_fingerprinted(shape: str, idempotency_store: Any) -> None:
    """Another body with the same key: 422."""
    handler = Handler(idempotency_store)
    handler(ev.make_event(shape, key="k", body='{"a":1}'))
    assert 422 == handler(ev.make_event(shape, key="k", body='{"a": 1}'))["statusCode"]


def test_query_is_fingerprinted(shape: str, idempotency_store: Any) -> None:
    """Another query string with the same key: 422; parameter order does not matter."""
    handler = Handler(idempotency_store)
    handler(ev.make_event(shape, key="k", query={"a": ["1"], "b": ["x y"]}))
    assert is_replay(handler(ev.make_event(shape, key="k", query={"b": ["x y"], "a": ["1"]})))
    assert (
        422
        == handler(ev.make_event(shape, key="k", query={"a": ["2"], "b": ["x y"]}))["statusCode"]
    )
    assert 422 == handler(ev.make_event(shape, key="k"))["statusCode"]


def test_base64_body_is_fingerprinted_decoded(shape: str, idempotency_store: Any) -> None:
    """The same bytes sent as text or base64 match; other bytes do not."""
    handler = Handler(idempotency_store)
    handler(ev.make_event(shape, key="k", body='{"a": 1}'))
    assert is_replay(handler(ev.make_event(shape, key="k", body='{"a": 1}', base64_body=True)))
    assert (
        422
        == handler(ev.make_event(shape, key="k", body='{"a": 2}', base64_body=True))["statusCode"]
    )


def test_binary_bodies_work(shape: str, idempotency_store: Any) -> None:
    """A base64 body that is not UTF-8 is fingerprinted by its bytes."""
    handler = Handler(idempotency_store)
    handler(ev.make_event(shape, key="k", body=b"\x89PNG\r\n\x1a\n\xff\x00"))
    assert is_replay(handler(ev.make_event(shape, key="k", body=b"\x89PNG\r\n\x1a\n\xff\x00")))
    assert 422 == handler(ev.make_event(shape, key="k", body=b"\x89PNG"))["statusCode"]


def test_missing_body_is_an_empty_body(shape: str, idempotency_store: Any) -> None:
    """``body: null`` and ``""`` are the same request."""
    handler = Handler(idempotency_store)
    event = ev.make_event(shape, key="k")
    event["body"] = None
    handler(event)
    assert is_replay(handler(ev.make_event(shape, key="k", body="")))


def test_validation_expression_replaces_the_fingerprint(shape: str, idempotency_store: Any) -> None:
    """``payload_validation_jmespath`` decides what must match, on the parsed body.

    Natively ``1`` and ``1.0`` are one number; the default format hashes them apart (422).
    """
    config = IdempotencyConfig(record_format="native", payload_validation_jmespath="body.amount")
    handler = Handler(idempotency_store, config=config)
    handler(ev.make_event(shape, key="k", body='{"amount": 1, "note": "a"}'))
    assert is_replay(
        handler(
            ev.make_event(shape, key="k", body='{"amount": 1.0, "note": "b"}', query={"q": ["1"]})
        )
    )
    assert 422 == handler(ev.make_event(shape, key="k", body='{"amount": 2}'))["statusCode"]


@pytest.mark.parametrize(
    "expression",
    [
        "powertools_json(body).amount",
        "powertools_json(powertools_base64(body)).amount",
    ],
)
def test_powertools_validation_expressions_keep_working(
    shape: str, idempotency_store: Any, expression: str
) -> None:
    """Expressions written for Powertools get the parsed body back from the built-ins."""
    config = IdempotencyConfig(payload_validation_jmespath=expression)
    handler = Handler(idempotency_store, config=config)
    base64_body = "base64" in expression
    handler(ev.make_event(shape, key="k", body='{"amount": 1}', base64_body=base64_body))
    assert is_replay(
        handler(
            ev.make_event(shape, key="k", body='{"amount": 1, "x": 2}', base64_body=base64_body)
        )
    )
    assert (
        422
        == handler(ev.make_event(shape, key="k", body='{"amount": 3}', base64_body=base64_body))[
            "statusCode"
        ]
    )


def test_validation_expression_sees_the_rest_of_the_event(
    shape: str, idempotency_store: Any
) -> None:
    """The view is the whole event: headers are reachable (v2 lower-cases their names)."""
    config = IdempotencyConfig(
        payload_validation_jmespath=(
            'headers."x-version" || headers."X-Version" || multiValueHeaders."X-Version"[0]'
        )
    )
    handler = Handler(idempotency_store, config=config)
    handler(ev.make_event(shape, key="k", headers={"X-Version": "1"}))
    assert 422 == handler(ev.make_event(shape, key="k", headers={"X-Version": "2"}))["statusCode"]


def test_body_is_parsed_once(
    shape: str, idempotency_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Key and validation expressions on the body share one JSON parse of it."""
    body = '{"order_id": "o-1", "amount": 5}'
    parses: list[str] = []
    real_loads = json.loads

    def counting_loads(text: Any, *args: Any, **kwargs: Any) -> Any:
        if text == body or text == body.encode():
            parses.append(text)
        return real_loads(text, *args, **kwargs)

    monkeypatch.setattr(json, "loads", counting_loads)
    config = IdempotencyConfig(
        event_key_jmespath="powertools_json(body).order_id",
        payload_validation_jmespath="[powertools_json(body).amount, body.amount]",
    )
    handler = Handler(idempotency_store, config=config)
    handler(ev.make_event(shape, body=body, base64_body=shape == "alb"))
    assert 1 == len(parses)


# --- keys from the body -----------------------------------------------------------------------


@pytest.mark.parametrize("expression", ["body.order_id", "powertools_json(body).order_id"])
def test_event_key_expression_supplies_a_key_when_the_header_is_absent(
    shape: str, idempotency_store: Any, expression: str
) -> None:
    """``event_key_jmespath`` reads the key from the parsed body."""
    handler = Handler(idempotency_store, config=IdempotencyConfig(event_key_jmespath=expression))
    handler(ev.make_event(shape, body='{"order_id": "o-1"}'))
    assert is_replay(handler(ev.make_event(shape, body='{"order_id": "o-1"}')))
    assert not is_replay(handler(ev.make_event(shape, body='{"order_id": "o-2"}')))


def test_event_key_expression_on_a_base64_body(shape: str, idempotency_store: Any) -> None:
    """The body is base64-decoded before it is parsed."""
    handler = Handler(
        idempotency_store, config=IdempotencyConfig(event_key_jmespath="body.order_id")
    )
    handler(ev.make_event(shape, body='{"order_id": 0}', base64_body=True))
    assert is_replay(handler(ev.make_event(shape, body='{"order_id": 0}')))


def test_the_header_wins_over_the_event_key_expression(shape: str, idempotency_store: Any) -> None:
    """With a header present the body key is not used."""
    handler = Handler(
        idempotency_store, config=IdempotencyConfig(event_key_jmespath="body.order_id")
    )
    handler(ev.make_event(shape, key="h", body='{"order_id": "o-1"}'))
    assert not is_replay(handler(ev.make_event(shape, body='{"order_id": "o-1"}')))
    assert is_replay(handler(ev.make_event(shape, key="h", body='{"order_id": "o-1"}')))


@pytest.mark.parametrize(
    "body", ['{"other": 1}', '{"order_id": null}', '{"order_id": ""}', "[]", "plain text", ""]
)
def test_no_key_in_the_body_is_a_400_when_required(
    shape: str, idempotency_store: Any, body: str
) -> None:
    """Neither header nor body key: 400 (or pass-through when keys are optional)."""
    config = IdempotencyConfig(event_key_jmespath="body.order_id")
    required = Handler(idempotency_store, config=config)
    assert 400 == required(ev.make_event(shape, body=body))["statusCode"]
    optional = Handler(idempotency_store, config=config, require_key=False, key_prefix="optional")
    assert 201 == optional(ev.make_event(shape, body=body))["statusCode"]
    assert 201 == optional(ev.make_event(shape, body=body))["statusCode"]
    assert 2 == optional.runs


@pytest.mark.parametrize("body", ["not json", "", "{", base64.b64encode(b"\xff").decode()])
def test_failing_expression_is_a_400(shape: str, idempotency_store: Any, body: str) -> None:
    """An expression that fails on the request (body not JSON): 400, never an exception."""
    config = IdempotencyConfig(event_key_jmespath="powertools_json(body).order_id")
    handler = Handler(idempotency_store, config=config)
    response = handler(ev.make_event(shape, body=body))
    assert 400 == response["statusCode"]
    assert "Unreadable request" == ev.problem(response)["title"]


def test_unhashable_body_key_is_a_400(shape: str, idempotency_store: Any) -> None:
    """A body key that has no canonical form (NaN) is a 400 (natively; Powertools hashes NaN)."""
    config = IdempotencyConfig(record_format="native", event_key_jmespath="body.order_id")
    handler = Handler(idempotency_store, config=config)
    assert 400 == handler(ev.make_event(shape, body='{"order_id": NaN}'))["statusCode"]


def test_user_functions_stay_available(shape: str, idempotency_store: Any) -> None:
    """Custom JMESPath functions are merged with the body-aware built-ins."""
    from jmespath import functions

    class Custom(functions.Functions):
        @functions.signature({"types": ["string"]})
        def _func_upper(self, value: str) -> str:
            return value.upper()

    config = IdempotencyConfig(
        event_key_jmespath="upper(powertools_json(body).order_id)",
        jmespath_options={"custom_functions": Custom()},
    )
    handler = Handler(idempotency_store, config=config)
    handler(ev.make_event(shape, body='{"order_id": "abc"}'))
    assert is_replay(handler(ev.make_event(shape, body='{"order_id": "abc"}')))


# --- malformed events -------------------------------------------------------------------------


@pytest.mark.parametrize("event", [None, [], "text", 42, {}, {"Records": []}, {"version": "2.0"}])
def test_events_that_are_not_proxy_requests_are_a_400(idempotency_store: Any, event: Any) -> None:
    """Not a proxy event at all: 400 problem, the handler does not run."""
    handler = Handler(idempotency_store)
    response = handler(event)
    assert 400 == response["statusCode"]
    assert "Malformed request" == ev.problem(response)["title"]
    assert 0 == handler.runs


def _break(event: dict[str, Any], shape: str, what: str) -> None:
    if what == "bad base64":
        event["body"], event["isBase64Encoded"] = "not base64!!", True
    elif what == "non-ascii base64":
        event["body"], event["isBase64Encoded"] = "caf\u00e9", True
    elif what == "body not a string":
        event["body"] = {"order_id": 1}
    elif what == "isBase64Encoded not a bool":
        event["isBase64Encoded"] = "true"
    elif what == "headers not an object":
        event["headers" if "headers" in event else "multiValueHeaders"] = ["Idempotency-Key: k"]
    elif what == "header value not a string":
        if shape in ev.MULTI_VALUE_SHAPES:
            event["multiValueHeaders"]["Idempotency-Key"] = [7]
        else:
            event["headers"]["Idempotency-Key"] = 7
    elif what == "method missing":
        if shape in ev.V2_SHAPES:
            del event["requestContext"]["http"]
        else:
            del event["httpMethod"]
    elif what == "method empty":
        if shape in ev.V2_SHAPES:
            event["requestContext"]["http"]["method"] = ""
        else:
            event["httpMethod"] = ""
    elif what == "path not a string":
        event["rawPath" if shape in ev.V2_SHAPES else "path"] = None
    elif what == "requestContext not an object":
        event["requestContext"] = "ctx"
    elif what == "query not an object":
        if shape in ev.V2_SHAPES:
            event["rawQueryString"] = 5
        elif shape == "alb-multivalue":
            event["multiValueQueryStringParameters"] = "a=1"
        else:
            event["queryStringParameters"] = "a=1"
            event.pop("multiValueQueryStringParameters", None)
    elif what == "caller not a string":
        event["requestContext"].setdefault("authorizer", {})["principalId"] = {"id": 1}


@pytest.mark.parametrize(
    "what",
    [
        "bad base64",
        "non-ascii base64",
        "body not a string",
        "isBase64Encoded not a bool",
        "headers not an object",
        "header value not a string",
        "method missing",
        "method empty",
        "path not a string",
        "requestContext not an object",
        "query not an object",
        "caller not a string",
    ],
)
def test_malformed_events_are_a_400_in_the_event_family(
    shape: str, idempotency_store: Any, what: str
) -> None:
    """A broken field: 400 problem+json (``about:blank``), never an exception."""
    event = ev.make_event(shape, key="k")
    _break(event, shape, what)
    if what == "caller not a string" and shape.startswith("alb"):
        pytest.skip("ALB events carry no caller")
    handler = Handler(idempotency_store)
    response = handler(event)
    assert 400 == response["statusCode"], response
    problem = ev.problem(response)
    assert "about:blank" == problem["type"]
    assert 0 == handler.runs


def test_builtins_still_decode_other_strings(shape: str, idempotency_store: Any) -> None:
    """``powertools_json``/``powertools_base64`` on another field behave as usual."""
    meta = base64.b64encode(b'{"v": 1}').decode()
    config = IdempotencyConfig(
        payload_validation_jmespath=(
            'powertools_json(powertools_base64(headers."x-meta" || multiValueHeaders."X-Meta"[0]'
            ' || headers."X-Meta"))'
        )
    )
    handler = Handler(idempotency_store, config=config)
    handler(ev.make_event(shape, key="k", headers={"X-Meta": meta}))
    other = base64.b64encode(b'{"v": 2}').decode()
    assert 422 == handler(ev.make_event(shape, key="k", headers={"X-Meta": other}))["statusCode"]


@pytest.mark.parametrize(
    "expression", ["powertools_json(`{}`)", "powertools_base64(`1`)", "powertools_json(body)"]
)
def test_builtins_on_non_strings_are_a_400(
    shape: str, idempotency_store: Any, expression: str
) -> None:
    """A built-in given something that is neither a string nor the body: 400."""
    config = IdempotencyConfig(event_key_jmespath=expression)
    handler = Handler(idempotency_store, config=config)
    assert 400 == handler(ev.make_event(shape, body="not json"))["statusCode"]
