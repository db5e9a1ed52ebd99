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
        lease ends, at least 1); not sent while ``wait_for_in_progress_seconds`` is waiting
422     the key was used before with a different request (fingerprint mismatch)
503     the idempotency store failed before the handler ran (``Retry-After: 1``); it did not run
======  ========================================================================================

The stored key's material is ``{"method", "route", "caller", "key"}``: the same key sent by two
callers, or to two routes or methods, names different records. See the README's HTTP section for
the exact identity sources and the fingerprint.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ParamSpec, TypeVar, cast

from idempotent_lambda._engine import IdempotentCall, run_async, run_sync
from idempotent_lambda._env import idempotency_disabled
from idempotent_lambda._identity import Invocation, build_invocation, default_prefix, is_missing
from idempotent_lambda._lambda_context import (
    LambdaContextLike,
    as_lambda_context,
    current_lambda_context,
)
from idempotent_lambda._observability import Decision, Outcome, report
from idempotent_lambda.adapters._http_event import (
    Family,
    HttpRequest,
    InvalidKeyError,
    MalformedEventError,
    family_of,
    parse_request,
    read_key,
)
from idempotent_lambda.adapters._http_jmespath import EventView, ExpressionError
from idempotent_lambda.adapters._http_response import (
    IDEMPOTENCY_PROBLEM_TYPE,
    Replayed,
    StorePolicy,
    mark_replayed,
    problem,
    storable,
)
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.decorators import _check_store
from idempotent_lambda.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyConfigError,
    IdempotencyKeyError,
    IdempotencyPersistenceLayerError,
    IdempotencyValidationError,
)
from idempotent_lambda.persistence.base import PersistenceStore
from idempotent_lambda.serialization import NoOpSerializer

__all__ = ["idempotent_http"]

P = ParamSpec("P")
R = TypeVar("R")

logger = logging.getLogger("idempotent_lambda")
_TOKEN_CHARS = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


class _RejectedError(Exception):
    """Answer the request with this response without running the handler."""

    def __init__(self, response: dict[str, Any]) -> None:
        super().__init__(response["statusCode"])
        self.response = response


def idempotent_http(
    *,
    persistence_store: PersistenceStore,
    config: IdempotencyConfig | None = None,
    header_name: str = "Idempotency-Key",
    require_key: bool = True,
    key_prefix: str | None = None,
    store_4xx: StorePolicy = True,
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
        store_4xx: Which 4xx responses are stored and replayed: all (True), none (False), or those
            for whose status the predicate returns True. 5xx responses are never stored.

    Raises:
        IdempotencyConfigError: An argument is not usable (at decoration time).
    """
    _check_store(persistence_store)
    if config is not None and not isinstance(config, IdempotencyConfig):
        raise IdempotencyConfigError("config must be an IdempotencyConfig")
    settings = config if config is not None else IdempotencyConfig()
    if not isinstance(header_name, str) or not header_name or set(header_name) - _TOKEN_CHARS:
        raise IdempotencyConfigError("header_name must be a valid HTTP header name")
    if key_prefix is not None and (not isinstance(key_prefix, str) or not key_prefix):
        raise IdempotencyConfigError("key_prefix must be a non-empty string")
    if not isinstance(require_key, bool):
        raise IdempotencyConfigError("require_key must be True or False")
    if not (isinstance(store_4xx, bool) or callable(store_4xx)):
        raise IdempotencyConfigError("store_4xx must be a bool or a callable taking a status code")

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        call = IdempotentCall(
            store=persistence_store,
            config=settings,
            function_name=function.__qualname__,
            serializer=NoOpSerializer(),
            store_result_if=storable(store_4xx),
            on_replay=lambda response, _record: Replayed(response),
        )
        adapter = _HttpAdapter(
            call=call,
            header_name=header_name,
            require_key=require_key,
            key_prefix=key_prefix,
            function=function,
        )
        return _wrap(function, call, adapter)

    return decorate


def _wrap(function: Callable[P, R], call: IdempotentCall, adapter: _HttpAdapter) -> Callable[P, R]:
    """Return the wrapper: bind the context, prepare, run the flow, answer in HTTP terms."""
    if inspect.iscoroutinefunction(function):
        async_function = cast(Callable[..., Awaitable[Any]], function)

        @functools.wraps(function)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            event, context = _locate(args, kwargs)
            own = as_lambda_context(context)
            token = current_lambda_context.set(own or current_lambda_context.get())
            try:
                plan = adapter.prepare(event, own)
                if plan is None:
                    return await async_function(*args, **kwargs)
                invocation, family = plan
                body = _Body(lambda: async_function(*args, **kwargs))
                try:
                    result = await run_async(call.flow(invocation), body.run_async)
                except Exception as exc:
                    response = None if body.ran else adapter.refusal(exc, family)
                    if response is None:
                        raise  # the handler's own exception (its record was released)
                    return response
                return adapter.answer(result, family)
            except _RejectedError as rejected:
                return rejected.response
            finally:
                current_lambda_context.reset(token)

        return cast(Callable[P, R], async_wrapper)

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        event, context = _locate(args, kwargs)
        own = as_lambda_context(context)
        token = current_lambda_context.set(own or current_lambda_context.get())
        try:
            plan = adapter.prepare(event, own)
            if plan is None:
                return function(*args, **kwargs)
            invocation, family = plan
            body = _Body(lambda: function(*args, **kwargs))
            try:
                result = run_sync(call.flow(invocation), body.run)
            except Exception as exc:
                response = None if body.ran else adapter.refusal(exc, family)
                if response is None:
                    raise  # the handler's own exception (its record was released)
                return cast(R, response)
            return cast(R, adapter.answer(result, family))
        except _RejectedError as rejected:
            return cast(R, rejected.response)
        finally:
            current_lambda_context.reset(token)

    return wrapper


class _Body:
    """The handler call, remembering whether it started (after that, its errors are its own)."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._call = call
        self.ran = False

    def run(self) -> Any:
        self.ran = True
        return self._call()

    async def run_async(self) -> Any:
        self.ran = True
        return await self._call()


class _HttpAdapter:
    """Turns one event into an invocation, and the engine's outcome into an HTTP response."""

    def __init__(
        self,
        *,
        call: IdempotentCall,
        header_name: str,
        require_key: bool,
        key_prefix: str | None,
        function: Callable[..., Any],
    ) -> None:
        self.call = call
        self.config = call.config
        self.header_name = header_name
        self.header = header_name.lower()
        self.require_key = require_key
        self.key_prefix = key_prefix
        self.function = function

    def prepare(
        self, event: Any, context: LambdaContextLike | None
    ) -> tuple[Invocation, Family] | None:
        """Return the invocation and the event's family; None to run the handler as is.

        ``context`` is the handler's own Lambda context, when it was given one.

        Raises:
            _RejectedError: The request is answered with a 400 problem.
        """
        if idempotency_disabled():
            report(Decision(Outcome.DISABLED, self.call.function_name), self.config.decision_hook)
            return None
        family = family_of(event)
        try:
            request = parse_request(event, self.header)
            key = read_key(request.key_values)
        except MalformedEventError as exc:
            raise self._reject(
                family, "malformed-event", "Malformed request", str(exc), problem_type="about:blank"
            ) from None
        except InvalidKeyError as exc:
            raise self._reject(
                family, "invalid-key", f"{self.header_name} is invalid", str(exc)
            ) from None
        view = EventView(self.config, event, request.body)
        material: Any = key
        if key is None and self.config._key_expression is not None:
            material = self._search(view, self.config._key_expression, "event_key_jmespath", family)
        if is_missing(material):
            if self.require_key:
                raise self._reject(
                    family,
                    "missing-key",
                    f"{self.header_name} is missing",
                    f"This operation is idempotent and requires an {self.header_name} header.",
                )
            report(Decision(Outcome.SKIPPED, self.call.function_name), self.config.decision_hook)
            return None
        if self.config._validation_expression is not None:
            validated = self._search(
                view, self.config._validation_expression, "payload_validation_jmespath", family
            )
        else:
            validated = self._fingerprint(request)
        store = self.call.store
        try:
            invocation = build_invocation(
                self.config,
                material={
                    "method": request.method,
                    "route": request.route,
                    "caller": None if request.caller is None else list(request.caller),
                    "key": material,
                },
                validated=validated,
                prefix=self.key_prefix or default_prefix(self.function),
                now_ms=store.clock.now_ms(),
                context=context if context is not None else self.config.bound_context(),
            )
        except IdempotencyKeyError:
            raise self._reject(
                family,
                "unhashable-key",
                "Unusable idempotency key",
                "The idempotency key or the validated part of the request cannot be hashed.",
            ) from None
        assert invocation is not None  # the material is a non-empty dict
        return invocation, family

    def answer(self, result: Any, family: Family) -> Any:
        """Return the handler's response, or a replayed one marked as such."""
        if isinstance(result, Replayed):
            return mark_replayed(result.response, family)
        return result

    def refusal(self, exc: Exception, family: Family) -> dict[str, Any] | None:
        """Return the problem response for an engine refusal before the handler ran, or None."""
        if isinstance(exc, IdempotencyValidationError):
            return problem(
                family,
                422,
                f"{self.header_name} is already used",
                f"This {self.header_name} was already used with a different request.",
                problem_type=IDEMPOTENCY_PROBLEM_TYPE,
            )
        if isinstance(exc, IdempotencyAlreadyInProgressError):
            return problem(
                family,
                409,
                f"A request is outstanding for this {self.header_name}",
                "The first request with this key is still being processed; retry later.",
                problem_type=IDEMPOTENCY_PROBLEM_TYPE,
                retry_after=self._seconds_until(exc.lease_expires_at_ms),
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

    def _seconds_until(self, lease_end_ms: int | None) -> int:
        if lease_end_ms is None:
            return 1
        return max(1, math.ceil((lease_end_ms - self.call.store.clock.now_ms()) / 1000))

    def _fingerprint(self, request: HttpRequest) -> dict[str, Any]:
        body = request.body if isinstance(request.body, bytes) else _utf8(request.body)
        return {
            "method": request.method,
            "path": request.path,
            "query": [[name, list(values)] for name, values in request.query],
            "body": hashlib.new(self.config.hash_function, body).hexdigest(),
        }

    def _search(self, view: EventView, expression: Any, name: str, family: Family) -> Any:
        try:
            return view.search(expression, name)
        except ExpressionError as exc:
            raise self._reject(
                family,
                "expression-failed",
                "Unreadable request",
                str(exc),
                problem_type="about:blank",
            ) from None

    def _reject(
        self,
        family: Family,
        reason: str,
        title: str,
        detail: str,
        *,
        problem_type: str = IDEMPOTENCY_PROBLEM_TYPE,
    ) -> _RejectedError:
        logger.info(
            "idempotency http rejected status=400 reason=%s function=%s",
            reason,
            self.call.function_name,
            extra={"idempotency": {"outcome": "REJECTED", "status": 400, "reason": reason}},
        )
        return _RejectedError(problem(family, 400, title, detail, problem_type=problem_type))


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _locate(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Any, Any]:
    event = args[0] if args else kwargs.get("event")
    context = args[1] if len(args) > 1 else kwargs.get("context")
    return event, context
