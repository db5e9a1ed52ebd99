"""Responses of the HTTP adapter: problem details, status policy, and marking replays.

Every response is built in the family of the event it answers: v1 and ALB events that carried
``multiValueHeaders`` get ``multiValueHeaders`` back (an ALB in multi-value mode ignores
``headers``), ALB responses carry a ``statusDescription``, v2 responses are plain.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from idempotent_lambda._clock import Clock
from idempotent_lambda.adapters._http_event import Family, Shape
from idempotent_lambda.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyPersistenceLayerError,
    IdempotencyTransactionConflictError,
    IdempotencyValidationError,
)

logger = logging.getLogger("idempotent_lambda")

PROBLEM_CONTENT_TYPE = "application/problem+json"
REPLAYED_HEADER = "Idempotent-Replayed"
#: ``type`` of the problems defined by the Idempotency-Key draft (missing/invalid key, key reuse,
#: concurrent request); other problems use ``about:blank`` (RFC 9457: the title says it all).
IDEMPOTENCY_PROBLEM_TYPE = (
    "https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/"
)

StorePolicy = bool | Callable[[int], bool]

#: 4xx statuses ``store_4xx=True`` does not store: the outcome depends on a credential, a permission
#: or a rate limit that may change, so a retry runs the handler again.
TRANSIENT_4XX = frozenset({401, 403, 407, 408, 429})


@dataclass(frozen=True, slots=True)
class Replayed:
    """A stored response on its way back, to be marked once the event's family is known."""

    response: Any


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


def refusal(
    exc: Exception, family: Family, *, header_name: str, clock: Clock
) -> dict[str, Any] | None:
    """Return the problem response for an engine refusal before the handler ran, or None."""
    if isinstance(exc, IdempotencyValidationError):
        return problem(
            family,
            422,
            f"{header_name} is already used",
            f"This {header_name} was already used with a different request.",
            problem_type=IDEMPOTENCY_PROBLEM_TYPE,
        )
    if isinstance(exc, IdempotencyAlreadyInProgressError):
        lease_end = exc.lease_expires_at_ms
        return problem(
            family,
            409,
            f"A request is outstanding for this {header_name}",
            "The first request with this key is still being processed; retry later.",
            problem_type=IDEMPOTENCY_PROBLEM_TYPE,
            retry_after=1 if lease_end is None else _seconds_until(lease_end, clock),
        )
    if isinstance(exc, IdempotencyPersistenceLayerError):
        return problem(
            family,
            503,
            "Service Unavailable",
            "The idempotency store is unavailable; the request was not processed.",
            retry_after=1,
        )
    return None


def conflict(exc: Exception, family: Family) -> dict[str, Any] | None:
    """Return the 409 for a business write whose condition failed after the handler returned.

    Nothing was written and nothing is stored, so the same request may be sent again (it runs
    again). The body says neither which write failed nor what the item held.
    """
    if not isinstance(exc, IdempotencyTransactionConflictError):
        return None
    return problem(
        family,
        409,
        "Conflict",
        "The request conflicts with the current state of a resource; nothing was changed.",
    )


def log_answer(log: Any, function: str, status: int, reason: str, *, outcome: str) -> None:
    """Log that the adapter answered for the handler (``log``: ``IdempotencyConfig.logger``)."""
    (logger if log is None else log).info(
        "idempotency http %s status=%s reason=%s function=%s",
        outcome.lower(),
        status,
        reason,
        function,
        extra={"idempotency": {"outcome": outcome, "status": status, "reason": reason}},
    )


def log_unknown_caller(log: Any, function: str, field: str) -> None:
    """Log, at ERROR, that an authenticated request was refused because its caller is unknown."""
    (logger if log is None else log).error(
        "idempotency http caller unknown: the request is authenticated but %s holds no caller; "
        "name the caller with idempotent_http(caller=...), or opt in to one key space for all "
        'callers with caller_scope="shared"; status=500 function=%s',
        field,
        function,
        extra={"idempotency": {"outcome": "REJECTED", "status": 500, "reason": "unknown-caller"}},
    )


def _seconds_until(lease_end_ms: int, clock: Clock) -> int:
    return max(1, math.ceil((lease_end_ms - clock.now_ms()) / 1000))


def status_of(response: Any) -> int:
    """Return a handler response's status; 200 when it has none (what HTTP API infers)."""
    if isinstance(response, Mapping):
        code = response.get("statusCode")
        if isinstance(code, int) and not isinstance(code, bool):
            return code
        if isinstance(code, str) and code.isascii() and code.isdigit():
            return int(code)
    return 200


def storable(policy: StorePolicy) -> Callable[[Any], bool]:
    """Return the engine's ``store_result_if``: no 5xx; 4xx as ``policy`` says; the rest yes.

    ``True`` stores every 4xx but `TRANSIENT_4XX`; a predicate decides every 4xx itself.
    """

    def store_result_if(response: Any) -> bool:
        status = status_of(response)
        if status >= 500:
            return False
        if status >= 400:
            if callable(policy):
                return bool(policy(status))
            return policy and status not in TRANSIENT_4XX
        return True

    return store_result_if


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

    Status, headers, multi-value headers, cookies, body and ``isBase64Encoded`` are kept. A v2
    response stored in the inferred format (no ``statusCode``) is spelled out the way HTTP API
    would have sent it, so the header can be added. A response that has none of these forms is
    returned as stored.
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
