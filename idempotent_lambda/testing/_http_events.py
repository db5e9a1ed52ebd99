"""API Gateway proxy events shaped as AWS sends them, for tests; re-exported by
`idempotent_lambda.testing`.

REST API events follow the Lambda proxy integration's input format, HTTP API events payload
format 2.0 (header names lower-cased, repeated values comma-joined, no body when there is none).
"""

from __future__ import annotations

import base64
import datetime
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

__all__ = ["api_gateway_http_event", "api_gateway_rest_event"]

ACCOUNT = "123456789012"
KEY_HEADER = "Idempotency-Key"
CLIENT_IP = "192.0.2.1"
USER_AGENT = "curl/8.5.0"
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

#: What `requestContext.identity` of a REST API event leaves empty without IAM or an API key.
_UNAUTHENTICATED = (
    "accessKey",
    "accountId",
    "apiKey",
    "apiKeyId",
    "caller",
    "cognitoAuthenticationProvider",
    "cognitoAuthenticationType",
    "cognitoIdentityId",
    "cognitoIdentityPoolId",
    "principalOrgId",
    "user",
)
#: Header or query values: one value, or several (a repeated header or parameter).
Values = Mapping[str, str | Sequence[str]]


def api_gateway_rest_event(
    *,
    method: str = "POST",
    path: str = "/orders",
    route: str | None = None,
    body: Any = "{}",
    headers: Values | None = None,
    idempotency_key: str | bool = True,
    query: Values | None = None,
    path_parameters: Mapping[str, str] | None = None,
    claims: Mapping[str, Any] | None = None,
    authorizer: Mapping[str, Any] | None = None,
    stage: str = "prod",
    api_id: str = "1234567890",
    request_id: str | None = None,
) -> dict[str, Any]:
    """Return a REST API (Lambda proxy integration) event for one request.

    With no arguments: an unauthenticated `POST /orders` with the JSON body `{}` and a fresh
    `Idempotency-Key`.

    Args:
        method: The HTTP method.
        path: The request path (`path`; `requestContext.path` adds the stage).
        route: The matched resource (`resource`), such as `/orders/{id}`; `path` by default.
        body: The body: a `str` as it is, `bytes` base64-encoded (`isBase64Encoded`), a dict or
            any other value as JSON text, None for no body (and no `Content-Type`).
        headers: Headers, over the defaults (names matched in any case); a list of values for
            a repeated header.
        idempotency_key: The `Idempotency-Key` header: True for a fresh UUID, a string for that
            key, False for no header.
        query: Query parameters (API Gateway delivers them decoded).
        path_parameters: `pathParameters`.
        claims: Cognito user pool claims, such as `{"sub": "alice"}`
            (`requestContext.authorizer.claims`): the request's caller.
        authorizer: `requestContext.authorizer` as a Lambda authorizer leaves it, such as
            `{"principalId": "alice"}`; `claims` are added to it.
        stage: The stage.
        api_id: The API's id (`requestContext.apiId`, and the `Host`).
        request_id: `requestContext.requestId`; a fresh one by default.
    """
    route = path if route is None else route
    raw, text, encoded = _body(body)
    host = f"{api_id}.execute-api.us-east-1.amazonaws.com"
    sent = _headers(host, raw, headers, idempotency_key)
    parameters = _values(query)
    when = datetime.datetime.now(datetime.timezone.utc)
    context: dict[str, Any] = {
        "accountId": ACCOUNT,
        "apiId": api_id,
        "domainName": host,
        "domainPrefix": api_id,
        "extendedRequestId": base64.b64encode(uuid.uuid4().bytes[:10]).decode(),
        "httpMethod": method,
        "identity": {
            **dict.fromkeys(_UNAUTHENTICATED),
            "sourceIp": CLIENT_IP,
            "userAgent": USER_AGENT,
            "userArn": None,
        },
        "path": f"/{stage}{path}",
        "protocol": "HTTP/1.1",
        "requestId": request_id or str(uuid.uuid4()),
        "requestTime": _clock_text(when),
        "requestTimeEpoch": int(when.timestamp() * 1000),
        "resourceId": "2gxmpl",
        "resourcePath": route,
        "stage": stage,
    }
    granted = dict(authorizer or {})
    if claims is not None:
        granted["claims"] = dict(claims)
    if granted:
        context["authorizer"] = granted
    return {
        "resource": route,
        "path": path,
        "httpMethod": method,
        "headers": {name: values[-1] for name, values in sent.items()},
        "multiValueHeaders": sent,
        "queryStringParameters": {name: v[-1] for name, v in parameters.items()} or None,
        "multiValueQueryStringParameters": parameters or None,
        "pathParameters": dict(path_parameters) if path_parameters else None,
        "stageVariables": None,
        "requestContext": context,
        "body": text,
        "isBase64Encoded": encoded,
    }


def api_gateway_http_event(
    *,
    method: str = "POST",
    path: str = "/orders",
    route: str | None = None,
    body: Any = "{}",
    headers: Values | None = None,
    idempotency_key: str | bool = True,
    query: Values | None = None,
    path_parameters: Mapping[str, str] | None = None,
    claims: Mapping[str, Any] | None = None,
    authorizer: Mapping[str, Any] | None = None,
    stage: str = "$default",
    api_id: str = "r3pmxmplak",
    request_id: str | None = None,
) -> dict[str, Any]:
    """Return an HTTP API event (payload format 2.0) for one request.

    With no arguments: an unauthenticated `POST /orders` with the JSON body `{}` and a fresh
    `idempotency-key`. The arguments are those of `api_gateway_rest_event`; where they differ:

    Args:
        path: The request path (`rawPath`, `requestContext.http.path`).
        route: The route's path: `routeKey` is `"{method} {route}"` (`path` by default);
            `"$default"` is the catch-all route.
        body: None leaves `body` out, as API Gateway does.
        headers: Names are lower-cased and repeated values comma-joined, as API Gateway
            delivers them.
        query: Sent as `rawQueryString` (URL-encoded) and `queryStringParameters`.
        claims: JWT authorizer claims, such as `{"sub": "alice"}`
            (`requestContext.authorizer.jwt.claims`; `scopes` from the `scope` claim).
        authorizer: `requestContext.authorizer` as another authorizer leaves it, such as
            `{"lambda": {"userId": "alice"}}`; `claims` are added to it.
        stage: The stage; `$default` by default.
    """
    route = path if route is None else route
    route_key = route if route.startswith("$") else f"{method} {route}"
    raw, text, encoded = _body(body)
    host = f"{api_id}.execute-api.us-east-1.amazonaws.com"
    sent = {
        name.lower(): ",".join(values)
        for name, values in _headers(host, raw, headers, idempotency_key).items()
    }
    parameters = _values(query)
    when = datetime.datetime.now(datetime.timezone.utc)
    context: dict[str, Any] = {
        "accountId": ACCOUNT,
        "apiId": api_id,
        "domainName": host,
        "domainPrefix": api_id,
        "http": {
            "method": method,
            "path": path,
            "protocol": "HTTP/1.1",
            "sourceIp": CLIENT_IP,
            "userAgent": USER_AGENT,
        },
        "requestId": request_id or base64.b64encode(uuid.uuid4().bytes[:10]).decode(),
        "routeKey": route_key,
        "stage": stage,
        "time": _clock_text(when),
        "timeEpoch": int(when.timestamp() * 1000),
    }
    granted = dict(authorizer or {})
    if claims is not None:
        scope = claims.get("scope")
        scopes = scope.split() if isinstance(scope, str) else None
        granted["jwt"] = {"claims": dict(claims), "scopes": scopes}
    if granted:
        context["authorizer"] = granted
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": path,
        "rawQueryString": urlencode([(k, v) for k, vs in parameters.items() for v in vs]),
        "headers": sent,
    }
    if parameters:
        event["queryStringParameters"] = {k: ",".join(vs) for k, vs in parameters.items()}
    if path_parameters:
        event["pathParameters"] = dict(path_parameters)
    event["requestContext"] = context
    if text is not None:
        event["body"] = text
    event["isBase64Encoded"] = encoded
    return event


def _body(body: Any) -> tuple[bytes | None, str | None, bool]:
    """Return a request body's bytes, the event's `body` and its `isBase64Encoded`."""
    if body is None:
        return None, None, False
    if isinstance(body, bytes | bytearray):
        return bytes(body), base64.b64encode(body).decode(), True
    text = body if isinstance(body, str) else json.dumps(body)
    return text.encode(), text, False


def _headers(
    host: str, raw: bytes | None, extra: Values | None, key: str | bool
) -> dict[str, list[str]]:
    """Return the request's headers, each name with its values: the defaults, then `extra`."""
    headers: dict[str, tuple[str, list[str]]] = {}

    def put(name: str, values: str | Sequence[str]) -> None:
        headers[name.lower()] = (name, [values] if isinstance(values, str) else list(values))

    put("Accept", "application/json")
    if raw is not None:
        put("Content-Type", "application/json")
        put("Content-Length", str(len(raw)))
    put("Host", host)
    put("User-Agent", USER_AGENT)
    put("X-Amzn-Trace-Id", f"Root=1-{uuid.uuid4().hex[:8]}-{uuid.uuid4().hex[:24]}")
    put("X-Forwarded-For", CLIENT_IP)
    put("X-Forwarded-Port", "443")
    put("X-Forwarded-Proto", "https")
    if key is not False:
        put(KEY_HEADER, str(uuid.uuid4()) if key is True else key)
    for name, values in (extra or {}).items():
        put(name, values)
    return dict(headers.values())


def _values(values: Values | None) -> dict[str, list[str]]:
    return {
        name: [value] if isinstance(value, str) else list(value)
        for name, value in (values or {}).items()
    }


def _clock_text(when: datetime.datetime) -> str:
    """Return `when` as API Gateway writes request times (`01/Jan/2026:00:00:00 +0000`)."""
    return f"{when:%d}/{_MONTHS[when.month - 1]}/{when:%Y:%H:%M:%S} +0000"
