"""HTTP idempotency for proxy handlers: API Gateway REST/HTTP APIs, Function URLs and ALB.

`idempotent_http` gives a handler the semantics of the IETF Idempotency-Key draft: the client
sends ``Idempotency-Key``; the first request runs the handler and its response is stored; a retry
gets that response back with ``Idempotent-Replayed: true``. Problems are answered with
``application/problem+json`` bodies:

======  ========================================================================================
status  when
======  ========================================================================================
400     key required but missing; key invalid or repeated; the event is not a proxy request;
        an expression could not be evaluated on the request
409     the first request with this key is still running (``Retry-After``: seconds until its
        lease ends, at least 1); not sent while ``wait_for_in_progress_seconds`` is waiting.
        Also (``type`` ``about:blank``, title ``Conflict``) when a write queued on
        `current_transaction` failed its condition after the handler returned: nothing was
        written or stored, so the same request may be sent again
422     the key was used before with a different request (fingerprint mismatch)
500     the request is authenticated but its caller cannot be identified (fail closed; see
        ``caller`` and ``caller_scope``); the handler did not run
503     the idempotency store failed before the handler ran (``Retry-After: 1``); it did not run
======  ========================================================================================

The stored key's material is ``{"method", "api", "stage", "route", "caller", "key"}``: the same
key sent by two callers, or to two routes, methods, APIs or stages, names different records. See
docs/http.md for the caller of each authenticated setup and for the fingerprint. Safe methods
(GET, HEAD, OPTIONS, TRACE) pass through untouched unless ``methods`` names them, so CORS
preflights never need a key.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, ParamSpec, TypeVar, cast

from idempotent_lambda._effects import TrackedBody
from idempotent_lambda._engine import IdempotentFunction
from idempotent_lambda._identity import reserve_default_prefix
from idempotent_lambda.adapters._http_caller import CallerOption, CallerPolicy
from idempotent_lambda.adapters._http_event import family_of
from idempotent_lambda.adapters._http_identity import (
    IdentityReader,
    RejectedError,
    check_header_name,
    method_filter,
)
from idempotent_lambda.adapters._http_response import (
    CookielessSerializer,
    Replayed,
    StorePolicy,
    conflict,
    log_answer,
    mark_replayed,
    refusal,
    storable,
)
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.decorators import _check_store
from idempotent_lambda.exceptions import IdempotencyConfigError
from idempotent_lambda.persistence.protocol import PersistenceStore
from idempotent_lambda.serialization import NoOpSerializer

__all__ = ["idempotent_http"]

P = ParamSpec("P")
R = TypeVar("R")


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

    Works on ``def`` and ``async def`` handlers and on REST API (v1), HTTP API (v2), Function URL
    and ALB events (with or without multi-value headers). Instead of calling the handler, the
    wrapper may answer with a problem response (see the module docstring).

    Args:
        persistence_store: Where records live.
        config: Expiry, cache, wait and hashing settings. ``event_key_jmespath`` is a second key
            source, used when the header is absent; it and ``payload_validation_jmespath`` (which
            replaces the default fingerprint) are evaluated on the event with ``body`` parsed.
            ``raise_on_no_idempotency_key`` is not used: ``require_key`` decides.
        header_name: The key header, matched in any case.
        require_key: Answer 400 when no key is found; when False the handler runs without
            idempotency for such requests.
        key_prefix: Replaces the default ``"{function name}.{module}.{qualname}"`` prefix.
        store_4xx: Which 4xx responses are stored and replayed: all but 401, 403, 407, 408 and
            429 (True), none (False), or those for whose status the predicate returns True.
            5xx responses are never stored.
        methods: The HTTP methods the key applies to, in any case; requests with other methods
            run the handler as if it were not decorated (no key needed, nothing stored). None,
            the default, covers every method but the safe ones: GET, HEAD, OPTIONS and TRACE.
        caller: Who the caller is, for setups whose identity the adapter cannot read itself (an
            HTTP API Lambda authorizer's context, say): a JMESPath expression on the event, such
            as ``"requestContext.authorizer.lambda.userId"``, or a callable taking the event.
            It returns the caller's id, or None to fall back to the adapter's own sources.
        caller_scope: ``"caller"`` scopes keys per caller, and answers 500 without running the
            handler when a request is authenticated but no caller can be read. ``"shared"``
            leaves the caller out: every caller shares one key space (one caller can then
            receive another's response; choose it only when that is intended).
        store_cookies: Store ``Set-Cookie`` headers and the v2 ``cookies`` list with the
            response, so replays carry them. Off by default: a replay would hand the first
            caller's session cookie to whoever retries with the same key.

    Raises:
        IdempotencyConfigError: An argument is not usable (at decoration time).
    """
    _check_store(persistence_store)
    if config is not None and not isinstance(config, IdempotencyConfig):
        raise IdempotencyConfigError("config must be an IdempotencyConfig")
    settings = config if config is not None else IdempotencyConfig()
    check_header_name(header_name)
    if key_prefix is not None and (not isinstance(key_prefix, str) or not key_prefix):
        raise IdempotencyConfigError("key_prefix must be a non-empty string")
    if not isinstance(require_key, bool):
        raise IdempotencyConfigError("require_key must be True or False")
    if not (isinstance(store_4xx, bool) or callable(store_4xx)):
        raise IdempotencyConfigError("store_4xx must be a bool or a callable taking a status code")
    covers = method_filter(methods)
    callers = CallerPolicy(caller, caller_scope)
    if not isinstance(store_cookies, bool):
        raise IdempotencyConfigError("store_cookies must be True or False")

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        if key_prefix is None:
            reserve_default_prefix(persistence_store, function)
        call = IdempotentFunction(
            store=persistence_store,
            config=settings,
            function_name=function.__qualname__,
            serializer=NoOpSerializer() if store_cookies else CookielessSerializer(),
            store_result_if=storable(store_4xx),
            on_replay=lambda response, _record: Replayed(response),
        )
        reader = IdentityReader(
            store=persistence_store,
            config=settings,
            function_name=call.function_name,
            header_name=header_name,
            require_key=require_key,
            covers=covers,
            key_prefix=key_prefix,
            function=function,
            callers=callers,
        )
        return _wrap(function, call, reader)

    return decorate


def _wrap(
    function: Callable[P, R], call: IdempotentFunction, reader: IdentityReader
) -> Callable[P, R]:
    """Return the wrapper: run the handler through the engine, answer failures in HTTP terms.

    Without an identity the handler still runs inside a transaction
    (`IdempotentFunction.unrecorded`), so `current_transaction` works there too; its writes
    commit when the response would have been stored.
    """
    if inspect.iscoroutinefunction(function):
        async_function = cast(Callable[..., Awaitable[Any]], function)

        @functools.wraps(function)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            event, context = _locate(args, kwargs)
            body = TrackedBody(functools.partial(async_function, *args, **kwargs))
            try:
                return _answer(
                    await call.acall(context, reader.deriver(event), body.run_async), event
                )
            except Exception as exc:
                return _answer_failure(exc, body, event, reader)

        return cast(Callable[P, R], async_wrapper)

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        event, context = _locate(args, kwargs)
        body = TrackedBody(functools.partial(function, *args, **kwargs))
        try:
            return cast(R, _answer(call.call(context, reader.deriver(event), body.run), event))
        except Exception as exc:
            return cast(R, _answer_failure(exc, body, event, reader))

    return wrapper


def _answer(result: Any, event: Any) -> Any:
    """Return the handler's response, or a replayed one marked as such."""
    if isinstance(result, Replayed):
        return mark_replayed(result.response, family_of(event))
    return result


def _answer_failure(
    exc: Exception, body: TrackedBody, event: Any, reader: IdentityReader
) -> dict[str, Any]:
    """Return the response that answers ``exc``; re-raise it when it is the handler's own."""
    if isinstance(exc, RejectedError):
        return exc.response
    family = family_of(event)
    response = None
    if not body.started:
        response = refusal(exc, family, header_name=reader.header_name, clock=reader.store.clock)
    elif body.returned:
        response = conflict(exc, family)
        if response is not None:
            log_answer(
                reader.config.logger,
                reader.function_name,
                409,
                "transaction-conflict",
                outcome="CONFLICT",
            )
    if response is None:
        raise exc  # the handler's own exception (its record was released), or unanswerable
    return response


def _locate(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Any, Any]:
    event = args[0] if args else kwargs.get("event")
    context = args[1] if len(args) > 1 else kwargs.get("context")
    return event, context
