"""The public decorators: `idempotent` for handlers, `idempotent_function` for any function.

Both work on `def` and `async def` functions and raise `IdempotencyConfigError` at decoration
time when an argument is not usable (a `data_keyword_argument` that is not a parameter, say).
A handler's Lambda context is bound while it runs: its remaining time is the lease, also for
nested `idempotent_function` calls. Results come back as dataclass or pydantic instances when
the serializer says so or the return annotation names such a class.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from idempotent_lambda._entry import Entry, Locate, keyword_only, locate_event, named_by, wrap
from idempotent_lambda._identity import Derive, Invocation, derive_invocation
from idempotent_lambda._lambda_context import LambdaContextLike
from idempotent_lambda._setup import exposing
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import IdempotencyConfigError
from idempotent_lambda.persistence.protocol import PersistenceStore
from idempotent_lambda.serialization import NoOpSerializer, resolve_serializer

P = ParamSpec("P")
R = TypeVar("R")


@keyword_only("@idempotent(persistence_store=...)")
def idempotent(
    *,
    persistence_store: PersistenceStore,
    config: IdempotencyConfig | None = None,
    key_prefix: str | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Make a Lambda handler ``handler(event, context)`` run once per logical request.

    Args:
        persistence_store: Where records live.
        config: Key, validation and expiry settings; the defaults when omitted.
        key_prefix: Replaces the default ``"{function name}.{module}.{qualname}"`` prefix.
    """
    entry = Entry(persistence_store, config, key_prefix)

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        return _decorate(entry, function, locate_event, NoOpSerializer())

    options = {"persistence_store": persistence_store, "config": config, "key_prefix": key_prefix}
    return exposing("idempotent", options, decorate)


@keyword_only("@idempotent_function(data_keyword_argument=..., persistence_store=...)")
def idempotent_function(
    *,
    data_keyword_argument: str,
    persistence_store: PersistenceStore,
    config: IdempotencyConfig | None = None,
    output_serializer: Any = None,
    key_prefix: str | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Make any function run once per payload, one of its arguments.

    Args:
        data_keyword_argument: The parameter holding the payload (by keyword or position).
        persistence_store: Where records live.
        config: Key, validation and expiry settings; the defaults when omitted.
        output_serializer: A serializer, or a dataclass or pydantic class to replay results as.
        key_prefix: Replaces the default ``"{function name}.{module}.{qualname}"`` prefix.
    """
    entry = Entry(persistence_store, config, key_prefix)

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        locate = _payload_locator(function, data_keyword_argument)
        serializer = resolve_serializer(output_serializer, function)
        return _decorate(entry, function, locate, serializer)

    options = {
        "data_keyword_argument": data_keyword_argument,
        "persistence_store": persistence_store,
        "config": config,
        "output_serializer": output_serializer,
        "key_prefix": key_prefix,
    }
    return exposing("idempotent_function", options, decorate)


def _decorate(
    entry: Entry, function: Callable[P, R], locate: Locate, serializer: Any
) -> Callable[P, R]:
    prefix = entry.prefix(function)
    call = entry.engine(function, serializer, key_prefix=prefix)
    config, clock = entry.config, entry.store.clock

    def derive(payload: Any, lease: LambdaContextLike | None) -> Invocation | None:
        return derive_invocation(
            config, payload, prefix=prefix(), now_ms=clock.now_ms(), context=lease
        )

    def deriver(payload: Any) -> Derive:
        return functools.partial(derive, payload)

    return wrap(function, call, locate, deriver)


def _payload_locator(function: Callable[..., Any], name: str) -> Locate:
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError) as exc:
        raise IdempotencyConfigError(f"cannot inspect the signature of {function!r}") from exc
    names = [p.name for p in parameters]
    if name not in names:
        owner = named_by(function).__qualname__
        raise IdempotencyConfigError(
            f"data_keyword_argument {name!r} is not a parameter of {owner}"
        )
    parameter = parameters[names.index(name)]
    positional = parameter.kind in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    )
    index = names.index(name) if positional else None
    default = None if parameter.default is inspect.Parameter.empty else parameter.default

    def payload_locator(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        if name in kwargs:
            return kwargs[name], None
        if index is not None and index < len(args):
            return args[index], None
        return default, None

    return payload_locator
