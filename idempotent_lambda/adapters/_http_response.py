"""What the HTTP adapter answers: problem responses and the refusals that become them, the
``Idempotent-Replayed`` mark on a replay, and the stored copy of a response without cookies.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from idempotent_lambda.adapters._http_request import Family, Shape

PROBLEM_CONTENT_TYPE = "application/problem+json"
REPLAYED_HEADER = "Idempotent-Replayed"
#: ``type`` of the problems the Idempotency-Key draft defines (missing or invalid key, key reuse,
#: concurrent request); other problems use ``about:blank`` (RFC 9457: the title says it all).
IDEMPOTENCY_PROBLEM_TYPE = (
    "https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/"
)


class RejectedError(Exception):
    """Answer with a problem response (400, or 500 for an unknown caller); the handler won't run.

    ``reason`` tags the log line; ``field`` says where an unknown caller was expected.
    """

    def __init__(
        self,
        status: int,
        reason: str,
        title: str,
        detail: str,
        *,
        problem_type: str = IDEMPOTENCY_PROBLEM_TYPE,
        field: str = "",
    ) -> None:
        super().__init__(status, reason)
        self.status, self.reason, self.title, self.detail = status, reason, title, detail
        self.problem_type, self.field = problem_type, field


def malformed(detail: str) -> RejectedError:
    """Return the 400 refusal of a request that is not the proxy event it claims to be."""
    return RejectedError(
        400, "malformed-event", "Malformed request", detail, problem_type="about:blank"
    )


class CallerUnknownError(Exception):
    """The request is authenticated, but no caller can be read from where ``field`` says."""

    def __init__(self, field: str) -> None:
        super().__init__(field)
        self.field = field


def problem(
    family: Family,
    status: int,
    title: str,
    detail: str,
    *,
    problem_type: str = "about:blank",
    retry_after: int | None = None,
) -> dict[str, Any]:
    """Return an ``application/problem+json`` response (RFC 9457) in the event's family."""
    body = json.dumps(
        {"type": problem_type, "title": title, "status": status, "detail": detail},
        separators=(",", ":"),
    )
    headers = {"Content-Type": PROBLEM_CONTENT_TYPE, "Cache-Control": "no-store"}
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    response: dict[str, Any] = {"statusCode": status}
    if family.shape is Shape.ALB:
        response["statusDescription"] = f"{status} {HTTPStatus(status).phrase}"
    if family.multi_value:
        response["multiValueHeaders"] = {name: [value] for name, value in headers.items()}
    else:
        response["headers"] = headers
    response["body"] = body
    response["isBase64Encoded"] = False
    return response


def status_of(response: Any) -> int:
    """Return a handler response's status; 200 when it has none (what HTTP API infers)."""
    if isinstance(response, Mapping):
        code = response.get("statusCode")
        if isinstance(code, int) and not isinstance(code, bool):
            return code
        if isinstance(code, str) and code.isascii() and code.isdigit():
            return int(code)
    return 200


class CookielessSerializer:
    """Store a response without ``Set-Cookie`` headers or the v2 ``cookies`` list.

    A cookie usually carries a session: replaying it would hand one client's session to whoever
    retries with the same key. The first response is returned untouched; only the stored copy,
    and so every replay, goes without cookies.
    """

    def to_dict(self, data: Any) -> Any:
        """Return ``data`` without cookies (the same object when it has none)."""
        if not isinstance(data, Mapping):
            return data
        stripped: dict[Any, Any] | None = None
        for field in ("headers", "multiValueHeaders"):
            headers = data.get(field)
            if isinstance(headers, Mapping) and any(_is_set_cookie(name) for name in headers):
                stripped = stripped if stripped is not None else dict(data)
                stripped[field] = {k: v for k, v in headers.items() if not _is_set_cookie(k)}
        if "cookies" in data:
            stripped = stripped if stripped is not None else dict(data)
            del stripped["cookies"]
        return data if stripped is None else stripped

    def from_dict(self, data: Any) -> Any:
        """Return the stored response as it is."""
        return data


def _is_set_cookie(name: Any) -> bool:
    return isinstance(name, str) and name.lower() == "set-cookie"


def mark_replayed(response: Any, family: Family) -> Any:
    """Return a replayed response with ``Idempotent-Replayed: true`` added in the right place.

    A v2 response stored in the inferred format (no ``statusCode``) is spelled out as HTTP API
    would have sent it; a response of no known form is returned as stored.
    """
    if isinstance(response, Mapping) and "statusCode" in response:
        marked = dict(response)
        single, multi = marked.get("headers"), marked.get("multiValueHeaders")
        if isinstance(multi, Mapping) or (family.multi_value and multi is None):
            marked["multiValueHeaders"] = _with_header(multi or {}, ["true"])
        if isinstance(single, Mapping) or (not family.multi_value and single is None):
            marked["headers"] = _with_header(single or {}, "true")
        return marked
    if family.shape is Shape.V2 and response is not None:
        try:
            body = json.dumps(response)
        except (TypeError, ValueError):
            return response
        return {
            "statusCode": 200,
            "headers": {"Content-Type": "application/json", REPLAYED_HEADER: "true"},
            "body": body,
            "isBase64Encoded": False,
        }
    return response


def _with_header(headers: Mapping[Any, Any], value: Any) -> dict[Any, Any]:
    marked = {
        name: existing
        for name, existing in headers.items()
        if not (isinstance(name, str) and name.lower() == REPLAYED_HEADER.lower())
    }
    marked[REPLAYED_HEADER] = value
    return marked
