"""HTTP idempotency for proxy handlers: API Gateway REST/HTTP APIs, Function URLs and ALB.

`idempotent_http` gives a handler the semantics of the IETF Idempotency-Key draft: the client
sends `Idempotency-Key`; the first request runs the handler and its response is stored; a retry
gets that response back with `Idempotent-Replayed: true`. The stored key covers method, API,
stage, route and caller besides the key itself, so the same key sent by two callers or to two
routes names different records. Safe methods (GET, HEAD, OPTIONS, TRACE) pass through untouched
unless `methods` names them, so CORS preflights never need a key.

The adapter answers some requests itself, with `application/problem+json` bodies:

| status | when |
|---|---|
| 400 | the key is missing (when required), invalid or repeated; the event is not a proxy request |
| 409 | the first request with this key is still running; or a transaction conflict (below) |
| 422 | the key was used before with a different request (fingerprint mismatch) |
| 500 | an authenticated caller cannot be identified (`caller_scope`); the store is misconfigured |
| 503 | the idempotency store failed before the handler ran (`Retry-After: 1`) |

A 400 also answers an expression that fails on the request. The first 409 carries `Retry-After`:
the seconds until the first request's lease ends, at least 1; it is not sent while
`wait_for_in_progress_seconds` waits. A 409 titled `Conflict` means that a write queued on
`current_transaction` failed its condition after the handler returned: nothing was written or
stored, so the request may be sent again. A misconfigured store (no AWS region, no credentials,
an invalid endpoint: `IdempotencyConfigError`) is a 500 without `Retry-After`, logged at ERROR
with the fix. On a 500 or 503 the handler did not run. Each answer is in the family of the
event: v1 and ALB events that carried `multiValueHeaders` get `multiValueHeaders` back, ALB
answers carry a `statusDescription`. The [HTTP guide](../http.md) tells which caller each
authenticated setup gets.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from idempotent_lambda._clock import Clock
from idempotent_lambda._effects import TrackedBody
from idempotent_lambda._entry import Entry, keyword_only, locate_event, wrap
from idempotent_lambda._setup import exposing
from idempotent_lambda.adapters._http_identity import CallerOption, CallerPolicy, IdentityReader
from idempotent_lambda.adapters._http_request import Family, family_of
from idempotent_lambda.adapters._http_response import (
    IDEMPOTENCY_PROBLEM_TYPE,
    CookielessSerializer,
    RejectedError,
    mark_replayed,
    problem,
    status_of,
)
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyConfigError,
    IdempotencyPersistenceLayerError,
    IdempotencyTransactionConflictError,
    IdempotencyValidationError,
)
from idempotent_lambda.persistence.protocol import PersistenceStore
from idempotent_lambda.serialization import NoOpSerializer

__all__ = ["idempotent_http"]

P = ParamSpec("P")
R = TypeVar("R")

logger = logging.getLogger("idempotent_lambda")

StorePolicy = bool | Callable[[int], bool]

#: RFC 9110's safe methods: they change nothing, so there is nothing to deduplicate. ``OPTIONS``
#: is also what a browser's CORS preflight sends, without the key header.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
#: 4xx statuses ``store_4xx=True`` does not store: the outcome depends on a credential, a
#: permission or a rate limit that may change, so a retry runs the handler again.
TRANSIENT_4XX = frozenset({401, 403, 407, 408, 429})

_TOKEN_CHARS = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


@keyword_only("@idempotent_http(persistence_store=...)")
def idempotent_http(
    *,
    persistence_store: PersistenceStore,
    config: IdempotencyConfig | None = None,
    header_name: str = "Idempotency-Key",
    require_key: bool = True,
    key_prefix: str | None = None,
    store_4xx: StorePolicy = True,
    methods: Collection[str] | None = None,
    caller: CallerOption = None,
    caller_scope: str = "caller",
    store_cookies: bool = False,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Make a proxy handler ``handler(event, context)`` honour the ``Idempotency-Key`` header.

    Args:
        persistence_store: Where records live.
        config: Expiry, cache, wait and hashing settings. ``event_key_jmespath`` (a key when the
            header is absent) and ``payload_validation_jmespath`` (replacing the fingerprint)
            read the event with ``body`` parsed; ``require_key`` replaces
            ``raise_on_no_idempotency_key``.
        header_name: The key header, matched in any case.
        require_key: Answer 400 when no key is found; when False such requests run unrecorded.
        key_prefix: Replaces the default ``"{function name}.{module}.{qualname}"`` prefix.
        store_4xx: Which 4xx responses are stored: all but `TRANSIENT_4XX` (True), none
            (False), or those the predicate accepts. 5xx responses are never stored.
        methods: The methods the key applies to, in any case; others run unrecorded. None: all
            but `SAFE_METHODS`.
        caller: Who the caller is where the adapter cannot tell (an HTTP API Lambda
            authorizer's context): a JMESPath expression on the event or a callable taking it,
            returning the caller's id, or None to fall back to the platform's fields.
        caller_scope: ``"caller"`` scopes keys per caller (500 when an authenticated caller
            cannot be read); ``"shared"`` gives every caller one key space.
        store_cookies: Store ``Set-Cookie`` and v2 ``cookies`` too (off: a replay would hand
            the first caller's session to whoever retries with the key).

    Raises:
        IdempotencyConfigError: An argument is not usable (at decoration time).
    """
    entry = Entry(persistence_store, config, key_prefix)
    if not isinstance(header_name, str) or not header_name or set(header_name) - _TOKEN_CHARS:
        raise IdempotencyConfigError("header_name must be a valid HTTP header name")
    if not isinstance(require_key, bool):
        raise IdempotencyConfigError("require_key must be True or False")
    if not (isinstance(store_4xx, bool) or callable(store_4xx)):
        raise IdempotencyConfigError("store_4xx must be a bool or a callable taking a status code")
    covers = _method_filter(methods)
    callers = CallerPolicy(caller, caller_scope)
    if not isinstance(store_cookies, bool):
        raise IdempotencyConfigError("store_cookies must be True or False")

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        prefix = entry.prefix(function)
        call = entry.engine(
            function,
            NoOpSerializer() if store_cookies else CookielessSerializer(),
            store_result_if=_storable(store_4xx),
            on_replay=lambda response, _record: _Replayed(response),
            key_source=_key_source(header_name, entry.config),
            adapter="http",
            key_prefix=prefix,
        )
        reader = IdentityReader(
            store=entry.store,
            config=entry.config,
            header_name=header_name,
            require_key=require_key,
            covers=covers,
            prefix=prefix,
            callers=callers,
        )
        answer = _HttpAnswer(
            entry.config.logger, call.function_name, header_name, entry.store.clock
        )
        return wrap(function, call, locate_event, reader.deriver, answer)

    options = {
        "persistence_store": persistence_store,
        "config": config,
        "header_name": header_name,
        "require_key": require_key,
        "key_prefix": key_prefix,
        "store_4xx": store_4xx,
        "methods": methods,
        "caller": caller,
        "caller_scope": caller_scope,
        "store_cookies": store_cookies,
    }
    return exposing("idempotent_http", options, decorate)


def _key_source(header_name: str, config: IdempotencyConfig) -> str:
    """Name where a request's key is read, for the warning when a request has none."""
    header = f"the {header_name} header"
    if config.event_key_jmespath:
        return f"{header}, then event_key_jmespath {config.event_key_jmespath!r}"
    return header


def _method_filter(methods: Collection[str] | None) -> Callable[[str], bool]:
    if methods is None:
        return lambda method: method not in SAFE_METHODS
    if isinstance(methods, str) or not isinstance(methods, Collection):
        raise IdempotencyConfigError(
            'methods must be a collection of HTTP method names, e.g. ("POST", "PATCH")'
        )
    covered = set()
    for method in methods:
        if not isinstance(method, str) or not method or set(method) - _TOKEN_CHARS:
            raise IdempotencyConfigError(f"methods holds an invalid HTTP method: {method!r}")
        covered.add(method.upper())
    if not covered:
        raise IdempotencyConfigError("methods must name at least one HTTP method")
    return frozenset(covered).__contains__


@dataclass(frozen=True, slots=True)
class _Replayed:
    """A stored response on its way back, to be marked once the event's family is known."""

    response: Any


@dataclass(frozen=True, slots=True)
class _HttpAnswer:
    """Answers in HTTP terms for one handler: marks replays, turns refusals into problems."""

    log: Any  # ``IdempotencyConfig.logger``
    function_name: str
    header_name: str
    clock: Clock

    def result(self, result: Any, event: Any) -> Any:
        """Return the handler's response, or a replayed one marked as such."""
        if isinstance(result, _Replayed):
            return mark_replayed(result.response, family_of(event))
        return result

    def failure(self, error: Exception, body: TrackedBody, event: Any) -> dict[str, Any]:
        """Return the problem that answers ``error``; re-raise it when it is the handler's own."""
        family = family_of(event)
        if isinstance(error, RejectedError):
            if error.status == 500:
                _log_unknown_caller(self.log, self.function_name, error.field)
            else:
                self._log(error.status, error.reason, "REJECTED")
            return problem(
                family, error.status, error.title, error.detail, problem_type=error.problem_type
            )
        response = None
        if not body.started:
            response = self._refusal(error, family)
        elif body.returned and isinstance(error, IdempotencyTransactionConflictError):
            # Nothing was written and nothing stored: the same request may be sent again. The
            # body says neither which write failed nor what the item held.
            self._log(409, "transaction-conflict", "CONFLICT")
            response = problem(
                family,
                409,
                "Conflict",
                "The request conflicts with the current state of a resource; nothing was changed.",
            )
        if response is None:
            raise error  # the handler's own exception (its record was released), or unanswerable
        return response

    def _refusal(self, error: Exception, family: Family) -> dict[str, Any] | None:
        """Return the problem for an engine refusal before the handler ran, or None."""
        header = self.header_name
        if isinstance(error, IdempotencyValidationError):
            return problem(
                family,
                422,
                f"{header} is already used",
                f"This {header} was already used with a different request.",
                problem_type=IDEMPOTENCY_PROBLEM_TYPE,
            )
        if isinstance(error, IdempotencyAlreadyInProgressError):
            end = error.lease_expires_at_ms
            wait_s = 1 if end is None else max(1, math.ceil((end - self.clock.now_ms()) / 1000))
            return problem(
                family,
                409,
                f"A request is outstanding for this {header}",
                "The first request with this key is still being processed; retry later.",
                problem_type=IDEMPOTENCY_PROBLEM_TYPE,
                retry_after=wait_s,
            )
        if isinstance(error, IdempotencyConfigError):  # the store's too: no region, say
            _log_misconfigured(self.log, self.function_name, error)
            return problem(
                family,
                500,
                "Internal Server Error",
                "The idempotency store is misconfigured; the request was not processed.",
            )
        if isinstance(error, IdempotencyPersistenceLayerError):
            return problem(
                family,
                503,
                "Service Unavailable",
                "The idempotency store is unavailable; the request was not processed.",
                retry_after=1,
            )
        return None

    def _log(self, status: int, reason: str, outcome: str) -> None:
        (logger if self.log is None else self.log).info(
            "idempotency http %s status=%s reason=%s function=%s",
            outcome.lower(),
            status,
            reason,
            self.function_name,
            extra={"idempotency": {"outcome": outcome, "status": status, "reason": reason}},
        )


def _log_unknown_caller(log: Any, function: str, field: str) -> None:
    (logger if log is None else log).error(
        "idempotency http caller unknown: the request is authenticated but %s holds no caller; "
        "name the caller with idempotent_http(caller=...), or opt in to one key space for all "
        'callers with caller_scope="shared"; status=500 function=%s',
        field,
        function,
        extra={"idempotency": {"outcome": "REJECTED", "status": 500, "reason": "unknown-caller"}},
    )


def _log_misconfigured(log: Any, function: str, error: IdempotencyConfigError) -> None:
    (logger if log is None else log).error(
        "idempotency http configuration error: %s; status=500 function=%s",
        error,  # our own message, naming the fix; never the request
        function,
        extra={"idempotency": {"outcome": "REJECTED", "status": 500, "reason": "config-error"}},
    )


def _storable(policy: StorePolicy) -> Callable[[Any], bool]:
    """Return the engine's ``store_result_if``: no 5xx; 4xx as ``policy`` says; the rest yes."""

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
