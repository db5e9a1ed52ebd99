"""Build HTTP proxy events of every shape from the JSON fixtures next to this file.

The fixtures follow AWS's documented examples: ``apigateway-v1`` (REST API, aws-proxy),
``apigateway-v2`` (HTTP API, payload 2.0), ``function-url``, ``alb`` and ``alb-multivalue``.
`make_event` edits a fresh copy the way each service would deliver the request.
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

HERE = Path(__file__).parent
SHAPES = ("apigateway-v1", "apigateway-v2", "function-url", "alb", "alb-multivalue")
V2_SHAPES = ("apigateway-v2", "function-url")
MULTI_VALUE_SHAPES = ("apigateway-v1", "alb-multivalue")

#: Authenticated setups each shape can carry whose caller the adapter reads by itself (the
#: fragments are in http-authorizers.json).
CALLER_SOURCES: dict[str, tuple[str, ...]] = {
    "apigateway-v1": (
        "cognito-user-pool",
        "lambda-authorizer",
        "iam",
        "iam-cognito-identity",
        "mtls",
        "api-key",
    ),
    "apigateway-v2": (
        "jwt",
        "jwt-client-credentials",
        "jwt-azp",
        "iam",
        "iam-cognito-identity",
        "mtls",
    ),
    "function-url": ("iam", "iam-cognito-identity"),
    "alb": ("oidc",),
    "alb-multivalue": ("oidc",),
}
#: Authenticated setups that name no caller the adapter can read: it refuses them (500) unless
#: ``caller=`` says where the caller is.
UNMAPPED_SETUPS: dict[str, tuple[str, ...]] = {"apigateway-v2": ("lambda-authorizer",)}
_FIXTURES: dict[str, dict[str, Any]] = {}


def load(shape: str) -> dict[str, Any]:
    """Return a fresh copy of the fixture of ``shape``."""
    if shape not in _FIXTURES:
        _FIXTURES[shape] = json.loads((HERE / f"{shape}.json").read_text())
    return copy.deepcopy(_FIXTURES[shape])


def make_event(
    shape: str,
    *,
    key: str | None = None,
    header_name: str = "Idempotency-Key",
    method: str = "POST",
    path: str = "/orders",
    route: str | None = None,
    body: str | bytes = '{"order_id": "ord-1", "amount": 42}',
    base64_body: bool = False,
    query: dict[str, list[str]] | None = None,
    headers: dict[str, str] | None = None,
    caller: tuple[str, str] | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """Return an event of ``shape`` for the described request.

    Args:
        key: Value of the idempotency key header; None leaves the header out.
        route: The matched route (v1 resource, v2 route path); ``path`` when omitted.
        body: Text, or bytes (always sent base64-encoded).
        base64_body: Send a text body base64-encoded.
        caller: ``(setup, id)`` with a setup of the shape from `CALLER_SOURCES` or
            `UNMAPPED_SETUPS`: the setup's authentication context, naming ``id`` as the caller.
    """
    event = load(shape)
    extra = dict(headers or {})
    if key is not None:
        extra[header_name] = key
    _set_headers(event, shape, extra)
    _set_request_line(event, shape, method, path, route or path)
    _set_query(event, shape, query or {})
    if isinstance(body, bytes) or base64_body:
        raw = body if isinstance(body, bytes) else body.encode()
        event["body"] = base64.b64encode(raw).decode()
        event["isBase64Encoded"] = True
    else:
        event["body"] = body
    if caller is not None:
        _set_caller(event, shape, *caller)
    if request_id is not None:
        if shape.startswith("alb"):
            _set_headers(event, shape, {"X-Amzn-Trace-Id": f"Root={request_id}"})
        else:
            event["requestContext"]["requestId"] = request_id
    return event


def header(response: dict[str, Any], name: str) -> list[str]:
    """Return the distinct values of response header ``name`` (any case), as API Gateway merges
    ``headers`` and ``multiValueHeaders``."""
    values: list[str] = []
    for field in ("headers", "multiValueHeaders"):
        for found, value in (response.get(field) or {}).items():
            if found.lower() == name.lower():
                values.extend(
                    v for v in (value if isinstance(value, list) else [value]) if v not in values
                )
    return values


def problem(response: dict[str, Any]) -> dict[str, Any]:
    """Return the parsed problem+json body of ``response``, checking its content type."""
    assert header(response, "Content-Type") == ["application/problem+json"]
    parsed: dict[str, Any] = json.loads(response["body"])
    return parsed


def _set_headers(event: dict[str, Any], shape: str, extra: dict[str, str]) -> None:
    for name, value in extra.items():
        if shape in V2_SHAPES:
            event["headers"][name.lower()] = value  # API Gateway v2 lower-cases header names
        if shape in ("apigateway-v1", "alb"):
            event["headers"][name] = value
        if shape in MULTI_VALUE_SHAPES:
            event["multiValueHeaders"][name] = [value]


def _set_request_line(
    event: dict[str, Any], shape: str, method: str, path: str, route: str
) -> None:
    if shape == "apigateway-v1":
        event["httpMethod"] = event["requestContext"]["httpMethod"] = method
        event["path"] = path
        event["resource"] = event["requestContext"]["resourcePath"] = route
        event["requestContext"]["path"] = f"/prod{path}"
    elif shape in V2_SHAPES:
        event["requestContext"]["http"]["method"] = method
        event["rawPath"] = event["requestContext"]["http"]["path"] = path
        if shape == "apigateway-v2":
            event["routeKey"] = event["requestContext"]["routeKey"] = f"{method} {route}"
    else:
        event["httpMethod"] = method
        event["path"] = path


def _set_query(event: dict[str, Any], shape: str, query: dict[str, list[str]]) -> None:
    if shape == "apigateway-v1":
        event["queryStringParameters"] = {k: v[-1] for k, v in query.items()} or None
        event["multiValueQueryStringParameters"] = dict(query) or None
    elif shape in V2_SHAPES:
        event["rawQueryString"] = urlencode([(k, v) for k, vs in query.items() for v in vs])
        if query:
            event["queryStringParameters"] = {k: ",".join(v) for k, v in query.items()}
    elif shape == "alb":  # ALB passes names and values still percent-encoded
        event["queryStringParameters"] = {quote(k): quote(v[-1]) for k, v in query.items()}
    else:
        event["multiValueQueryStringParameters"] = {
            quote(k): [quote(v) for v in vs] for k, vs in query.items()
        }


def _set_caller(event: dict[str, Any], shape: str, setup: str, identity: str) -> None:
    allowed = CALLER_SOURCES[shape] + UNMAPPED_SETUPS.get(shape, ())
    assert setup in allowed, f"{shape} cannot carry a {setup} caller"
    fragment = _authorizers()[shape][setup]
    text = json.dumps(fragment).replace("CALLER", identity)
    parsed = json.loads(text)
    if "headers" in parsed:
        _set_headers(event, shape, parsed["headers"])
    if "requestContext" in parsed:
        _merge(event["requestContext"], parsed["requestContext"])


def _merge(target: dict[str, Any], extra: dict[str, Any]) -> None:
    for name, value in extra.items():
        if isinstance(value, dict) and isinstance(target.get(name), dict):
            _merge(target[name], value)
        else:
            target[name] = value


def _authorizers() -> dict[str, Any]:
    if "authorizers" not in _FIXTURES:
        _FIXTURES["authorizers"] = json.loads((HERE / "http-authorizers.json").read_text())
    return _FIXTURES["authorizers"]
