"""The entry layer every decorator and adapter goes through before the engine takes a call.

`Entry` checks the arguments they all take, refuses functions whose body would not run when they
are called (`refuse_unrunnable`), names the default key prefix (and refuses a second function
that would share it on one store) and builds the engine of a decorated function; `wrap` turns a
``def`` or ``async def`` function into its idempotent wrapper. `keyword_only` makes each public
decorator say how to call it when it is used without parentheses.
"""

from __future__ import annotations

import functools
import inspect
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar, cast, get_origin

from idempotent_lambda._effects import TrackedBody
from idempotent_lambda._engine import Hooks, IdempotentFunction
from idempotent_lambda._grant import check_granted
from idempotent_lambda._identity import Derive
from idempotent_lambda._record_format import POWERTOOLS, RecordFormat
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import IdempotencyConfigError
from idempotent_lambda.persistence.protocol import PersistenceStore, store_for_format
from idempotent_lambda.serialization._models import return_annotation

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11

P = ParamSpec("P")
R = TypeVar("R")

Locate = Callable[[tuple[Any, ...], dict[str, Any]], tuple[Any, Any]]
"""Finds ``(payload, Lambda context)`` in a call's arguments."""


class Answer(Protocol):
    """How an adapter turns what the engine returned or raised into its source's answer."""

    def result(self, result: Any, payload: Any) -> Any:
        """Return the answer to a call that returned ``result``."""
        ...

    def failure(self, error: Exception, body: TrackedBody, payload: Any) -> Any:
        """Return the answer to a call that raised ``error``, or re-raise it."""
        ...


class Entry:
    """The checked arguments of one decorator, shared by every function it decorates.

    Args:
        persistence_store: Where records live.
        config: The settings; the defaults when None.
        key_prefix: Replaces the default prefix (see `default_prefix`).

    Raises:
        IdempotencyConfigError: An argument is not usable.
    """

    __slots__ = ("_view", "config", "key_prefix", "store")

    def __init__(
        self,
        persistence_store: PersistenceStore,
        config: IdempotencyConfig | None,
        key_prefix: str | None,
    ) -> None:
        if not isinstance(persistence_store, PersistenceStore):
            raise IdempotencyConfigError(
                "persistence_store must be a PersistenceStore (claim, complete, release, get and "
                "a clock), such as DynamoDBPersistenceLayer or InMemoryPersistenceLayer"
            )
        if config is not None and not isinstance(config, IdempotencyConfig):
            raise IdempotencyConfigError("config must be an IdempotencyConfig")
        if key_prefix is not None and (not isinstance(key_prefix, str) or not key_prefix):
            raise IdempotencyConfigError("key_prefix must be a non-empty string")
        self.store = persistence_store
        self.config = config if config is not None else IdempotencyConfig()
        self.key_prefix = key_prefix
        self._view: PersistenceStore | None = None

    def view(self) -> PersistenceStore:
        """Return the store's view for the config's record format, made once: the engines of
        this decorator's functions read and write through it, and so do a batch's own calls.

        Raises:
            IdempotencyConfigError: The store cannot keep records in that format.
        """
        if self._view is None:
            self._view = store_for_format(self.store, self.config.record_format)
        return self._view

    def prefix(self, function: Callable[..., Any]) -> Callable[[], str]:
        """Check ``function``, then return what gives its key prefix at call time.

        A default prefix is reserved on the store.

        Raises:
            IdempotencyConfigError: ``function`` cannot be made idempotent (`refuse_unrunnable`),
                or another live function holds that default prefix on the store.
            IdempotencyKeyPrefixNotGrantedError: the CDK construct granted the function
                other key prefixes (`check_granted`).
        """
        refuse_unrunnable(function)
        fixed = self.key_prefix
        if fixed is not None:
            check_granted(fixed)
            return lambda: fixed
        check_granted(default_prefix(function, self.config.format))
        reserve_default_prefix(self.store, function)
        return functools.partial(default_prefix, function, self.config.format)

    def engine(
        self,
        function: Callable[..., Any],
        serializer: Any,
        *,
        adapter: str | None = None,
        **hooks: Unpack[Hooks],
    ) -> IdempotentFunction:
        """Build ``function``'s engine, with the adapter's ``hooks`` (see `IdempotentFunction`).

        Its spans are named after the key prefix when one is given, else the function's
        ``module.qualname`` (a Lambda handler is usually just ``handler``), after the
        ``adapter`` (``"sqs"``, ``"http"``) that calls it, if any.
        """
        named = named_by(function)
        span_name = self.key_prefix or f"{named.__module__}.{named.__qualname__}"
        if adapter is not None:
            span_name = f"{adapter} {span_name}"
        return IdempotentFunction(
            store=self.view(),
            config=self.config,
            function_name=named.__qualname__,
            serializer=serializer,
            span_name=span_name,
            **hooks,
        )


def keyword_only(usage: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Make a decorator factory refuse positional arguments with a `TypeError` naming ``usage``.

    Used without parentheses (``@idempotent`` over a function), a factory would get the function
    as its one positional argument; the error then shows the call it needs instead.
    """

    def decorate(factory: Callable[P, R]) -> Callable[P, R]:
        name = getattr(factory, "__name__", "the decorator")

        @functools.wraps(factory)
        def checked(*args: P.args, **kwargs: P.kwargs) -> R:
            if args:
                raise TypeError(
                    f"{name} takes keyword arguments only: decorate with {usage}, with "
                    f"parentheses, not a bare @{name}"
                )
            return factory(*args, **kwargs)

        return checked

    return decorate


def refuse_unrunnable(function: Callable[..., Any]) -> None:
    """Refuse a function whose call does not run its body: nothing true could be stored.

    Refused at decoration: generator and async generator functions (their body runs only
    when iterated, after the record would be completed) and a ``def`` function annotated to
    return a coroutine or awaitable. A ``def`` function that returns a coroutine without
    saying so cannot be told apart before it is called: a call that returns one is refused
    then, and its claim released (see `TrackedBody.run`).

    Raises:
        IdempotencyConfigError: ``function`` is one of those.
    """
    if not callable(function):
        raise IdempotencyConfigError("the decorated object must be callable")
    candidates = [function]
    if not (inspect.isroutine(function) or inspect.isclass(function)):
        candidates.append(type(function).__call__)  # a callable object's method
    name = named_by(function).__qualname__
    for candidate in candidates:
        if inspect.isgeneratorfunction(candidate) or inspect.isasyncgenfunction(candidate):
            raise IdempotencyConfigError(
                f"{name} is a generator function: calling it runs none of its body, so there "
                "is no result to store; return a list (or another value) instead of yielding"
            )
    if is_async(function):
        return
    returned = return_annotation(function)
    if (get_origin(returned) or returned) in (Coroutine, Awaitable):
        raise IdempotencyConfigError(
            f"{name} is a def function that returns a coroutine: its body would run only when "
            "awaited, after the record was completed; decorate the async def function itself, "
            "or make this one async def"
        )


def locate_event(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """Return the event and context of a ``handler(event, context)`` call."""
    event = args[0] if args else kwargs.get("event")
    context = args[1] if len(args) > 1 else kwargs.get("context")
    return event, context


def is_async(function: Callable[..., Any]) -> bool:
    """Tell whether calling ``function`` (or a callable object) returns a coroutine."""
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        type(function).__call__
    )


def wrap(
    function: Callable[P, R],
    call: IdempotentFunction,
    locate: Locate,
    deriver: Callable[[Any], Derive | None],
    answer: Answer | None = None,
) -> Callable[P, R]:
    """Return ``function``'s idempotent wrapper, ``async def`` when ``function`` is.

    Args:
        function: The decorated function.
        call: Its engine.
        locate: Finds the payload and the Lambda context in the arguments.
        deriver: Payload -> how the engine derives its invocation (None: run unrecorded).
        answer: Turns the outcome into the source's answer; without one, it is returned or
            raised as it is.
    """
    if is_async(function):
        async_function = cast(Callable[..., Awaitable[Any]], function)

        @functools.wraps(function)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            payload, context = locate(args, kwargs)
            body = TrackedBody(functools.partial(async_function, *args, **kwargs))
            if answer is None:
                return await call.acall(context, deriver(payload), body.run_async, carrier=payload)
            try:
                result = await call.acall(
                    context, deriver(payload), body.run_async, carrier=payload
                )
            except Exception as exc:
                return answer.failure(exc, body, payload)
            return answer.result(result, payload)

        return cast(Callable[P, R], async_wrapper)

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        payload, context = locate(args, kwargs)
        body = TrackedBody(functools.partial(function, *args, **kwargs))
        if answer is None:
            return call.call(context, deriver(payload), body.run, carrier=payload)
        try:
            result = call.call(context, deriver(payload), body.run, carrier=payload)
        except Exception as exc:
            return answer.failure(exc, body, payload)
        return answer.result(result, payload)

    return cast(Callable[P, R], wrapper)


def named_by(function: Callable[..., Any]) -> Any:
    """Return what names ``function``'s default prefix and its log lines.

    That is the function itself; for a `functools.partial`, the function it binds; for a
    callable object, its class.
    """
    while isinstance(function, functools.partial):
        function = function.func
    if hasattr(function, "__qualname__") and hasattr(function, "__module__"):
        return function
    return type(function)


def default_prefix(function: Callable[..., Any], record_format: RecordFormat = POWERTOOLS) -> str:
    """Return ``"{function name}.{module}.{qualname}"``, the name read now by the format.

    ``record_format`` defaults to the default config's (Powertools').
    """
    named = named_by(function)
    return f"{record_format.function_name()}.{named.__module__}.{named.__qualname__}"


class _Holders:
    """The functions holding default prefixes on one store, weakly where they can be."""

    __slots__ = ("strong", "weak")

    def __init__(self) -> None:
        self.weak: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        self.strong: dict[str, object] = {}  # callables that cannot be weakly referenced

    def get(self, name: str) -> object | None:
        held = self.weak.get(name)
        return self.strong.get(name) if held is None else held

    def hold(self, name: str, function: object) -> None:
        try:
            self.weak[name] = function
        except TypeError:
            self.strong[name] = function


# id(store) -> default prefix path -> the function holding it. A function's entry goes when the
# function is freed; a store's when the store is.
_reserved: dict[int, _Holders] = {}
_reserved_lock = threading.Lock()  # the callbacks that drop entries never take it


def reserve_default_prefix(store: object, function: Callable[..., Any]) -> None:
    """Refuse a second, different function whose default prefix is already used on ``store``.

    Two functions with one ``module.qualname`` (handlers built by one factory, two lambdas in one
    module) would share keys and replay each other's results. The check is per store object, and
    the same function decorated twice is no collision. A rebuilt function (a factory called
    again, a module reloaded) is accepted once the earlier one has been freed, by reference
    counting or by a collection (nothing here runs the collector). Stores are held weakly (one
    that cannot be is not checked), and so are functions, where they can be.

    Raises:
        IdempotencyConfigError: A different function, still alive, holds that prefix on ``store``.
    """
    named = named_by(function)
    name = f"{named.__module__}.{named.__qualname__}"
    with _reserved_lock:
        holders = _reserved.get(id(store))
        if holders is None:
            try:
                weakref.finalize(store, _reserved.pop, id(store), None).atexit = False
            except TypeError:
                return
            holders = _reserved[id(store)] = _Holders()
        holder = holders.get(name)
        if holder is not None and holder is not function:
            raise IdempotencyConfigError(
                f"another function already uses the default key prefix {name!r} on this "
                "persistence store (handlers built by one factory, or two lambdas in one "
                "module, share their module and qualname); pass key_prefix= to tell their "
                "keys apart"
            )
        holders.hold(name, function)
