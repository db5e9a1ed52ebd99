"""Default key prefixes: two different functions may not share one on a store."""

from __future__ import annotations

import functools
import gc
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyConfig,
    IdempotencyConfigError,
    InMemoryPersistenceLayer,
    idempotent,
    idempotent_function,
)
from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.adapters.dynamodb_stream import idempotent_stream_handler
from idempotent_lambda.adapters.sqs import idempotent_sqs_handler
from idempotent_lambda.testing import FakeLambdaContext
from tests.events import http_events as ev
from tests.unit._doubles import Decisions

Decorator = Callable[..., Any]
ADAPTERS: list[Decorator] = [
    idempotent,
    idempotent_http,
    idempotent_sqs_handler,
    idempotent_stream_handler,
]


def make(decorator: Decorator, store: Any, answer: int, **options: Any) -> Any:
    """A factory: each call builds a handler whose qualname is ``make.<locals>.handler``."""

    @decorator(persistence_store=store, **options)
    def handler(event: Any, context: Any) -> Any:
        return {"statusCode": 200, "body": str(answer)}

    return handler


@pytest.mark.parametrize("decorator", ADAPTERS)
def test_two_handlers_from_one_factory_on_one_store_are_refused(decorator: Decorator) -> None:
    """The second, different handler with the same default prefix fails at decoration."""
    store = InMemoryPersistenceLayer()
    first = make(decorator, store, 1)

    with pytest.raises(IdempotencyConfigError, match="key_prefix"):
        make(decorator, store, 2)
    assert first is not None


def test_two_lambdas_in_one_module_are_refused() -> None:
    """Two lambdas share the qualname ``<lambda>``: the second one needs a key_prefix."""
    store = InMemoryPersistenceLayer()
    first = idempotent(persistence_store=store)(lambda event, context: 1)

    with pytest.raises(IdempotencyConfigError, match="key_prefix"):
        idempotent(persistence_store=store)(lambda event, context: 2)
    assert first({"id": 1}, None) == 1


@pytest.mark.parametrize("decorator", ADAPTERS)
def test_the_same_factory_with_a_fresh_store_each_time_works(decorator: Decorator) -> None:
    """Test suites rebuild the same handler for every test, each with its own store."""
    handlers = [make(decorator, InMemoryPersistenceLayer(), n) for n in range(3)]
    assert 3 == len(handlers)


@pytest.mark.parametrize("decorator", ADAPTERS)
def test_distinct_key_prefixes_let_a_factory_share_a_store(decorator: Decorator) -> None:
    """A key_prefix per handler is the way to share one store."""
    store = InMemoryPersistenceLayer()
    handlers = [make(decorator, store, n, key_prefix=f"handler-{n}") for n in range(3)]
    assert 3 == len(handlers)


def test_the_same_function_decorated_twice_on_one_store_is_no_collision() -> None:
    """Decorating one function object twice keys both copies alike, which is what they are."""
    store = InMemoryPersistenceLayer()

    def process(order: Any) -> int:
        return 1

    first = idempotent_function(data_keyword_argument="order", persistence_store=store)(process)
    second = idempotent_function(data_keyword_argument="order", persistence_store=store)(process)
    assert [1, 1] == [first(order={"id": 1}), second(order={"id": 1})]


@pytest.fixture
def no_automatic_gc() -> Iterator[None]:
    """Only collect garbage when the code under test asks for it."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.usefixtures("no_automatic_gc")
def test_a_rebuilt_handler_may_reuse_the_prefix_once_the_old_one_is_garbage() -> None:
    """A handler nothing uses any more does not block its rebuild, even inside a cycle."""
    store = InMemoryPersistenceLayer()

    def make_self_referencing() -> Any:
        @idempotent(persistence_store=store)
        def handler(event: Any, context: Any) -> Any:
            return handler  # the closure refers to itself: freed only by the collector

        return handler

    old = make_self_referencing()
    del old
    gc.collect()
    rebuilt = make_self_referencing()
    assert rebuilt is not None


@pytest.mark.usefixtures("no_automatic_gc")
def test_a_handler_freed_by_reference_counting_gives_its_prefix_up_at_once() -> None:
    """No collection is needed when nothing but the handler refers to itself."""
    store = InMemoryPersistenceLayer()
    old = make(idempotent, store, 1)
    del old
    rebuilt = make(idempotent, store, 2)
    assert "2" == rebuilt({"id": 1}, None)["body"]


def test_the_check_never_runs_the_garbage_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    """A collision is refused without a collection, which would run arbitrary finalizers."""

    def collect(*args: Any) -> int:
        raise AssertionError("the library ran gc.collect()")

    monkeypatch.setattr(gc, "collect", collect)
    store = InMemoryPersistenceLayer()
    first = make(idempotent, store, 1)

    with pytest.raises(IdempotencyConfigError, match="key_prefix"):
        make(idempotent, store, 2)
    assert first is not None


def test_stores_are_checked_separately() -> None:
    """The same default prefix on two stores is no collision: their keys never meet."""
    first = make(idempotent, InMemoryPersistenceLayer(), 1)
    second = make(idempotent, InMemoryPersistenceLayer(), 2)
    assert ["1", "2"] == [first({"id": 1}, None)["body"], second({"id": 1}, None)["body"]]


def test_the_check_keeps_no_store_alive() -> None:
    """A store nothing else uses is freed, with what the check knew about it."""
    store = InMemoryPersistenceLayer()
    make(idempotent, store, 1)
    dropped = weakref.ref(store)
    del store
    gc.collect()

    assert dropped() is None


ONE_REQUEST: dict[Decorator, Any] = {
    idempotent: {"id": 1},
    idempotent_http: ev.make_event("apigateway-v1", key="k-1"),
    idempotent_sqs_handler: {
        "Records": [
            {
                "messageId": "m-1",
                "body": "{}",
                "attributes": {"ApproximateReceiveCount": "1"},
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
            }
        ]
    },
    idempotent_stream_handler: {
        "Records": [
            {
                "eventID": "e1",
                "eventName": "INSERT",
                "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/T/stream/2024",
                "dynamodb": {"Keys": {"pk": {"S": "a"}}, "SequenceNumber": "1"},
            }
        ]
    },
}


@pytest.mark.parametrize("record_format", ["native", "powertools"])
@pytest.mark.parametrize("decorator", ADAPTERS)
def test_the_decorator_and_the_adapters_derive_one_default_prefix(
    decorator: Decorator, record_format: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a function name: ``local`` natively, Powertools' ``test-func`` in its format."""
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    decisions = Decisions()
    config = IdempotencyConfig(record_format=record_format, decision_hook=decisions)
    handler = make(decorator, InMemoryPersistenceLayer(), 1, config=config)

    handler(ONE_REQUEST[decorator], FakeLambdaContext())

    name = "local" if record_format == "native" else "test-func"
    expected = {f"{name}.{__name__}.make.<locals>.handler"}
    assert expected == {d.key.rpartition("#")[0] for d in decisions.items if d.key}


def refund(event: Any, context: Any, *, amount: int) -> dict[str, Any]:
    """A module-level handler that partials below bind."""
    return {"refunded": amount}


def charge(event: Any, context: Any, *, amount: int) -> dict[str, Any]:
    """Another one."""
    return {"charged": amount}


class ChargeHandler:
    """A callable object used as a handler."""

    def __call__(self, event: Any, context: Any) -> dict[str, Any]:
        return {"charged": 1}


@pytest.mark.parametrize("decorator", ADAPTERS)
def test_partials_of_two_functions_get_the_prefixes_of_those_functions(
    decorator: Decorator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: every functools.partial was named ``functools.partial``, so the second one
    on a store was refused. A partial's default prefix is its underlying function's."""
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    store, decisions = InMemoryPersistenceLayer(), Decisions()
    config = IdempotencyConfig(record_format="native", decision_hook=decisions)
    for function in (refund, charge):
        handler = decorator(persistence_store=store, config=config)(
            functools.partial(function, amount=5)
        )
        handler(ONE_REQUEST[decorator], FakeLambdaContext())

    expected = [f"local.{__name__}.refund", f"local.{__name__}.charge"]
    assert expected == [d.key.rpartition("#")[0] for d in decisions.items if d.key]


@pytest.mark.parametrize("decorator", ADAPTERS)
def test_a_callable_object_is_named_by_its_class(
    decorator: Decorator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An instance with ``__call__`` gets its class's prefix; a second instance on the same
    store needs a key_prefix of its own."""
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    store, decisions = InMemoryPersistenceLayer(), Decisions()
    config = IdempotencyConfig(record_format="native", decision_hook=decisions)
    handler = decorator(persistence_store=store, config=config)(ChargeHandler())
    handler(ONE_REQUEST[decorator], FakeLambdaContext())

    assert [f"local.{__name__}.ChargeHandler"] == [
        d.key.rpartition("#")[0] for d in decisions.items if d.key
    ]
    with pytest.raises(IdempotencyConfigError, match="key_prefix"):
        decorator(persistence_store=store, config=config)(ChargeHandler())


@pytest.mark.parametrize("make_callable", [ChargeHandler, lambda: functools.partial(charge)])
def test_a_missing_data_keyword_argument_of_a_callable_is_a_config_error(
    make_callable: Callable[[], Any],
) -> None:
    """Regression: naming a parameter that a callable object or a partial does not have raised
    a raw AttributeError (``__qualname__``) instead of the configuration error."""
    decorate = idempotent_function(
        data_keyword_argument="order", persistence_store=InMemoryPersistenceLayer()
    )
    with pytest.raises(IdempotencyConfigError, match="'order' is not a parameter of"):
        decorate(make_callable())
