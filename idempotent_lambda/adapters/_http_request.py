"""Read a proxy event: its shape, request line, query, body and idempotency key header.

Four event shapes reach a proxy handler:

| shape | recognised by | route (part of the key's scope) |
|---|---|---|
| REST API (v1) | `httpMethod` (also HTTP API payload 1.0) | `resource` |
| HTTP API (v2) | `version == "2.0"` | `routeKey` |
| Function URL | v2 with `routeKey` `"$default"` or none | `rawPath` |
| ALB | `requestContext.elb` | `path` |

A route of `"$default"` (a catch-all) falls back to the path, so unrelated paths never share a
scope; the scope also names the API (`apiId`, else `domainName`; the target group ARN on ALB)
and the stage. Reading raises `MalformedEventError` or `InvalidKeyError` only, with a fixed
reason (never request data), safe to log and to return to the client.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from idempotent_lambda.exceptions import MalformedEventError

#: Longest accepted idempotency key (the IETF draft's examples and Stripe's limit).
MAX_KEY_LENGTH = 255
# Structured Field parameters after a quoted key: ``;name`` or ``;name=value``; ignored.
_SF_PARAMETERS = re.compile(r'(?:;[ ]*[a-z*][a-z0-9_\-.*]*(?:=(?:"(?:[^"\\]|\\["\\])*"|[^;"]*))?)*')

Query = tuple[tuple[str, tuple[str, ...]], ...]


class Shape(enum.Enum):
    """The family of an event, which is also the family its response must belong to."""

    V1 = "v1"
    """REST API (and HTTP API payload 1.0)."""
    V2 = "v2"
    """HTTP API payload 2.0 and Lambda Function URLs."""
    ALB = "alb"
    """Application Load Balancer target."""


@dataclass(frozen=True, slots=True)
class Family:
    """How to answer an event: its shape, and whether headers travel as multi-value lists."""

    shape: Shape
    multi_value: bool


class InvalidKeyError(Exception):
    """The idempotency key header is present but unusable; the reason holds no user data."""


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """The parts of one proxy event that identify and fingerprint the request.

    Attributes:
        route: The route the request matched (see the module docstring).
        query: Sorted ``(name, (values...))`` pairs as the event holds them (v2 and ALB: not
            decoded).
        body: Bytes when it was base64-encoded (decoded here), else the text.
    """

    method: str
    route: str
    path: str
    api: str | None
    stage: str | None
    query: Query
    content_type: tuple[str, ...]
    key_values: tuple[str, ...]
    body: str | bytes


def family_of(event: Any) -> Family:
    """Guess the shape of anything, for answering it; never raises."""
    if not isinstance(event, dict):
        return Family(Shape.V1, multi_value=False)
    context = event.get("requestContext")
    if isinstance(context, dict) and "elb" in context:
        return Family(Shape.ALB, multi_value="multiValueHeaders" in event)
    if event.get("version") == "2.0":
        return Family(Shape.V2, multi_value=False)
    return Family(Shape.V1, multi_value=isinstance(event.get("multiValueHeaders"), dict))


def method_of(event: Any) -> str | None:
    """Return the request's upper-case method, or None when it cannot be read; never raises."""
    if not isinstance(event, dict):
        return None
    if family_of(event).shape is Shape.V2:
        context = event.get("requestContext")
        http = context.get("http") if isinstance(context, dict) else None
        method = http.get("method") if isinstance(http, dict) else None
    else:
        method = event.get("httpMethod")
    return method.upper() if isinstance(method, str) and method else None


def parse_request(event: Any, header_name: str) -> HttpRequest:
    """Read the request out of a proxy event (``header_name`` in lower case).

    Raises:
        MalformedEventError: Not a proxy event, a field of the wrong type, or a body that is not
            valid base64.
    """
    if not isinstance(event, dict):
        raise MalformedEventError("the event is not a JSON object")
    family = family_of(event)
    context = event.get("requestContext")
    if context is not None and not isinstance(context, dict):
        raise MalformedEventError("requestContext is not an object")
    context = context or {}
    route = None
    if family.shape is Shape.V2:
        http = context.get("http")
        method = _string(http.get("method") if isinstance(http, dict) else None, "method")
        path = _string(event.get("rawPath"), "rawPath")
        route = _optional_string(event.get("routeKey"), "routeKey")
        query = _raw_query(event)
    else:
        if "httpMethod" not in event:
            raise MalformedEventError(
                "no httpMethod: not an API Gateway, Function URL or ALB event"
            )
        method = _string(event.get("httpMethod"), "httpMethod")
        path = _string(event.get("path"), "path")
        if family.shape is Shape.V1:
            route = _optional_string(event.get("resource"), "resource")
        query = _query_parameters(event)
    if not method:
        raise MalformedEventError("the method is empty")
    api, stage = _api_and_stage(family, context)
    return HttpRequest(
        method=method.upper(),
        route=path if route is None or route in ("", "$default") else route,
        path=path,
        api=api,
        stage=stage,
        query=query,
        content_type=_header_values(event, "content-type"),
        key_values=tuple(
            part for value in _header_values(event, header_name) for part in split_list(value)
        ),
        body=_body(event),
    )


def split_list(value: str) -> list[str]:
    """Split a header value into its list members: a comma outside a quoted string separates.

    HTTP API and Function URL events deliver a repeated header as one comma-joined value, so a
    repeated key header reads the same on every shape. A key holding a comma must be quoted.
    """
    if "," not in value:
        return [value]
    parts, start, quoted, escaped = [], 0, False, False
    for index, char in enumerate(value):
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            parts.append(value[start:index])
            start = index + 1
    parts.append(value[start:])
    return parts


def read_key(values: tuple[str, ...]) -> str | None:
    """Return the key from the header's values, bare or a quoted Structured Field string.

    Returns None when the header is absent. The key is 1 to 255 printable ASCII characters.

    Raises:
        InvalidKeyError: The header is repeated with different values, or its value is unusable.
    """
    if not values:
        return None
    keys = {_unquote(value.strip(" \t")) for value in values}
    if len(keys) > 1:
        raise InvalidKeyError("the header was sent more than once with different values")
    (key,) = keys
    if not 0 < len(key) <= MAX_KEY_LENGTH or not (key.isascii() and key.isprintable()):
        raise InvalidKeyError(
            f"the key must be 1 to {MAX_KEY_LENGTH} printable ASCII characters, "
            "bare or as a quoted Structured Field string"
        )
    return key


def _unquote(value: str) -> str:
    if not value.startswith('"'):
        return value
    chars: list[str] = []
    index = 1
    while index < len(value):
        char = value[index]
        if char == "\\":
            escaped = value[index + 1 : index + 2]
            if escaped not in ('"', "\\"):
                raise InvalidKeyError("the quoted key holds an invalid escape")
            chars.append(escaped)
            index += 2
        elif char == '"':
            if _SF_PARAMETERS.fullmatch(value, index + 1) is None:
                raise InvalidKeyError("unexpected text after the quoted key")
            return "".join(chars)
        else:
            chars.append(char)
            index += 1
    raise InvalidKeyError("the quoted key has no closing quote")


def _header_values(event: dict[str, Any], name: str) -> tuple[str, ...]:
    """Collect the header's values from ``headers`` and ``multiValueHeaders``, any name case."""
    found: list[str] = []
    size = len(name)
    for field in ("headers", "multiValueHeaders"):
        headers = event.get(field)
        if headers is None:
            continue
        if not isinstance(headers, dict):
            raise MalformedEventError(f"{field} is not an object")
        for header, value in headers.items():
            # Cheap length test first: this runs for every header of every request.
            if type(header) is not str or len(header) != size or header.lower() != name:
                continue
            if value is None:
                continue
            if field == "headers":
                found.append(_string(value, "a header value"))
            elif isinstance(value, list):
                found.extend(_string(item, "a header value") for item in value)
            else:
                raise MalformedEventError("a multiValueHeaders entry is not a list")
    return tuple(found)


def _api_and_stage(family: Family, context: dict[str, Any]) -> tuple[str | None, str | None]:
    """Return the route's API and stage, so a key used on one stage never replays on another."""
    if family.shape is Shape.ALB:
        elb = context.get("elb")
        arn = elb.get("targetGroupArn") if isinstance(elb, dict) else None
        return _optional_string(arn, "targetGroupArn"), None
    api = context.get("apiId")
    if api is None or api == "":
        api = context.get("domainName")
    return _optional_string(api, "apiId"), _optional_string(context.get("stage"), "stage")


def _body(event: dict[str, Any]) -> str | bytes:
    body = event.get("body")
    if body is None:
        body = ""
    elif not isinstance(body, str):
        raise MalformedEventError("body is not a string")
    encoded = event.get("isBase64Encoded")
    if encoded is None or encoded is False:
        return body
    if encoded is not True:
        raise MalformedEventError("isBase64Encoded is not a boolean")
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError) as exc:  # ValueError: non-ASCII characters
        raise MalformedEventError("body is not valid base64") from exc


def _raw_query(event: dict[str, Any]) -> Query:
    """Group the raw query string's pairs, left undecoded: ``%FF`` stays apart from ``%FE``, and
    ``+`` from ``%20`` and ``%2B``, exactly as the client sent them."""
    raw = event.get("rawQueryString")
    if raw is None:
        return _query_parameters(event)
    grouped: dict[str, list[str]] = {}
    for pair in _string(raw, "rawQueryString").split("&"):
        if pair:
            name, _, value = pair.partition("=")
            grouped.setdefault(name, []).append(value)
    return tuple(sorted((name, tuple(values)) for name, values in grouped.items()))


def _query_parameters(event: dict[str, Any]) -> Query:
    multi = event.get("multiValueQueryStringParameters")
    if multi is not None:
        if not isinstance(multi, dict):
            raise MalformedEventError("multiValueQueryStringParameters is not an object")
        pairs = []
        for name, values in multi.items():
            if not isinstance(values, list):
                raise MalformedEventError("a query parameter's values are not a list")
            pairs.append(
                (_string(name, "a query name"), tuple(_string(v, "a query value") for v in values))
            )
        return tuple(sorted(pairs))
    single = event.get("queryStringParameters")
    if single is None:
        return ()
    if not isinstance(single, dict):
        raise MalformedEventError("queryStringParameters is not an object")
    return tuple(
        sorted(
            (_string(name, "a query name"), (_string(value, "a query value"),))
            for name, value in single.items()
        )
    )


def _string(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise MalformedEventError(f"{what} is missing or not a string")
    return value


def _optional_string(value: Any, what: str) -> str | None:
    return None if value is None else _string(value, what)


def event_view(event: Mapping[str, Any], body: str | bytes) -> dict[str, Any]:
    """Return the event as expressions see it: a shallow copy with the body parsed as JSON.

    A body that is not JSON is left as it is, so ``powertools_json(body)`` fails as in Powertools.
    """
    view = dict(event)
    with contextlib.suppress(ValueError, RecursionError):  # not UTF-8, not JSON, too deep
        view["body"] = json.loads(body.decode("utf-8") if isinstance(body, bytes) else body)
    return view
