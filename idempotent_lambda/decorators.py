"""The public decorators: `idempotent` for handlers, `idempotent_function` for any function."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar, cast

from idempotent_lambda._engine import IdempotentFunction
from idempotent_lambda._identity import (
    Invocation,
    derive_invocation,
    prefix_source,
    reserve_default_prefix,
)
from idempotent_lambda._lambda_context import LambdaContextLike
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import IdempotencyConfigError
from idempotent_lambda.persistence.protocol import PersistenceStore
from idempotent_lambda.serialization import NoOpSerializer, resolve_serializer

P = ParamSpec("P")
R = TypeVar("R")

_Locate = Callable[[tuple[Any, ...], dict[str, Any]], tuple[Any, Any]]


def idempotent(
    *,
    persistence_store: PersistenceStore,
    config: IdempotencyConfig | None = None,
    key_prefix: str | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Make a Lambda handler ``handler(event, context)`` run once per logical request.

    The key is derived from the event (``config.event_key_jmespath``); the first invocation runs
    the handler and stores its result, every retry gets the stored result back. The handler's
    Lambda context is bound for the duration of the call, so its remaining time becomes the
    lease and nested `idempotent_function` calls see it too.

    Args:
        persistence_store: Where records live.
        config: Key, validation and expiry settings; the defaults when omitted.
        key_prefix: Replaces the default ``"{function name}.{module}.{qualname}"`` prefix.

    Raises:
        IdempotencyConfigError: The store or config is not usable (at decoration time).
    """

    def locate(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        event = args[0] if args else kwargs.get("event")
        context = args[1] if len(args) > 1 else kwargs.get("context")
        return event, context

    return _decorator(persistence_store, config, key_prefix, locate, lambda _: NoOpSerializer())


def idempotent_function(
    *,
    data_keyword_argument: str,
    persistence_store: PersistenceStore,
    config: IdempotencyConfig | None = None,
    output_serializer: Any = None,
    key_prefix: str | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Make any function run once per payload, where the payload is one of its arguments.

    Args:
        data_keyword_argument: Name of the parameter holding the payload; it may be passed by
            keyword or by position. Dataclass and pydantic payloads are hashed as their JSON form.
        persistence_store: Where records live.
        config: Key, validation and expiry settings; the defaults when omitted.
        output_serializer: A serializer (``to_dict``/``from_dict``), or a dataclass or pydantic
            class, so such results come back as instances on replay. Derived from the return
            annotation when omitted.
        key_prefix: Replaces the default ``"{function name}.{module}.{qualname}"`` prefix.

    Raises:
        IdempotencyConfigError: ``data_keyword_argument`` is not a parameter of the function, or
            the serializer is unusable (at decoration time).
    """

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        locate = _payload_locator(function, data_keyword_argument)
        serializer = resolve_serializer(output_serializer, function)
        make = _decorator(persistence_store, config, key_prefix, locate, lambda _: serializer)
        return make(function)

    return decorate


def _decorator(
    store: PersistenceStore,
    config: IdempotencyConfig | None,
    key_prefix: str | None,
    locate: _Locate,
    serializer_for: Callable[[Callable[..., Any]], Any],
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    _check_store(store)
    if config is not None and not isinstance(config, IdempotencyConfig):
        raise IdempotencyConfigError("config must be an IdempotencyConfig")
    settings = config if config is not None else IdempotencyConfig()
    if key_prefix is not None and (not isinstance(key_prefix, str) or not key_prefix):
        raise IdempotencyConfigError("key_prefix must be a non-empty string")

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        if key_prefix is None:
            reserve_default_prefix(store, function)
        call = IdempotentFunction(
            store=store,
            config=settings,
            function_name=function.__qualname__,
            serializer=serializer_for(function),
        )
        prefix = (
            prefix_source(function, settings.format)
            if key_prefix is None
            else _constant(key_prefix)
        )
        clock = store.clock

        def derive(payload: Any, lease: LambdaContextLike | None) -> Invocation | None:
            return derive_invocation(
                settings, payload, prefix=prefix(), now_ms=clock.now_ms(), context=lease
            )

        if inspect.iscoroutinefunction(function):
            async_function = cast(Callable[..., Awaitable[Any]], function)

            @functools.wraps(function)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                payload, context = locate(args, kwargs)
                body = functools.partial(async_function, *args, **kwargs)
                return await call.acall(context, functools.partial(derive, payload), body)

            return cast(Callable[P, R], async_wrapper)

        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            payload, context = locate(args, kwargs)
            body = functools.partial(function, *args, **kwargs)
            return call.call(context, functools.partial(derive, payload), body)

        return wrapper

    return decorate


def _constant(value: str) -> Callable[[], str]:
    def constant() -> str:
        return value

    return constant


def _payload_locator(function: Callable[..., Any], name: str) -> _Locate:
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError) as exc:
        raise IdempotencyConfigError(f"cannot inspect the signature of {function!r}") from exc
    names = [p.name for p in parameters]
    if name not in names:
        raise IdempotencyConfigError(
            f"data_keyword_argument {name!r} is not a parameter of {function.__qualname__}"
        )
    parameter = parameters[names.index(name)]
    positional = parameter.kind in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    )
    index = names.index(name) if positional else None

    def payload_locator(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        if name in kwargs:
            return kwargs[name], None
        if index is not None and index < len(args):
            return args[index], None
        return parameter.default if parameter.default is not inspect.Parameter.empty else None, None

    return payload_locator


def _check_store(store: object) -> None:
    required = ("claim", "complete", "release", "get", "clock")
    missing = [name for name in required if not hasattr(store, name)]
    if missing:
        raise IdempotencyConfigError(
            f"persistence_store lacks {', '.join(missing)}; pass a DynamoDBPersistenceLayer, an "
            "InMemoryPersistenceLayer or another PersistenceStore"
        )
