"""Decorators used in ways that cannot work fail early, with an error that says what to do."""

from __future__ import annotations

import asyncio
import functools
import warnings
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyConfigError,
    InMemoryPersistenceLayer,
    idempotent,
    idempotent_function,
)
from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.adapters.dynamodb_stream import idempotent_stream_handler
from idempotent_lambda.adapters.kafka import idempotent_kafka_handler
from idempotent_lambda.adapters.kinesis import idempotent_kinesis_handler
from idempotent_lambda.adapters.sqs import idempotent_sqs_handler
from tests.unit._doubles import Runs

Decorator = Callable[..., Any]
FACTORIES: dict[str, Callable[[InMemoryPersistenceLayer], Decorator]] = {
    "idempotent": lambda store: idempotent(persistence_store=store),
    "idempotent_function": lambda store: idempotent_function(
        data_keyword_argument="event", persistence_store=store
    ),
    "idempotent_http": lambda store: idempotent_http(persistence_store=store),
    "idempotent_sqs_handler": lambda store: idempotent_sqs_handler(persistence_store=store),
    "idempotent_stream_handler": lambda store: idempotent_stream_handler(persistence_store=store),
    "idempotent_kinesis_handler": lambda store: idempotent_kinesis_handler(persistence_store=store),
    "idempotent_kafka_handler": lambda store: idempotent_kafka_handler(persistence_store=store),
}


def generator_handler(event: Any, context: Any) -> Iterator[int]:
    yield 1


async def async_generator_handler(event: Any, context: Any) -> AsyncIterator[int]:
    yield 1


class GeneratorCall:
    """A callable object whose ``__call__`` is a generator function."""

    def __call__(self, event: Any, context: Any) -> Iterator[int]:
        yield 1


async def _work(event: Any) -> dict[str, Any]:
    return {"done": event}


def annotated_coroutine_handler(event: Any, context: Any) -> Coroutine[Any, Any, dict[str, Any]]:
    return _work(event)


UNRUNNABLE = {
    "generator": generator_handler,
    "async-generator": async_generator_handler,
    "generator-__call__": GeneratorCall(),
    "partial-of-a-generator": functools.partial(generator_handler, context=None),
    "annotated-coroutine": annotated_coroutine_handler,
}


@pytest.mark.parametrize("function", UNRUNNABLE.values(), ids=UNRUNNABLE)
@pytest.mark.parametrize("decorator", FACTORIES.values(), ids=FACTORIES)
def test_functions_whose_call_runs_no_body_are_refused_at_decoration(
    decorator: Callable[[InMemoryPersistenceLayer], Decorator], function: Any
) -> None:
    """Regression: a generator function (or a def annotated to return a coroutine) was
    accepted; its first call ran none of its body and stored "could not be stored" under the
    key. Now every decorator refuses it with `IdempotencyConfigError`."""
    with pytest.raises(IdempotencyConfigError, match=r"generator|coroutine"):
        decorator(InMemoryPersistenceLayer())(function)


def test_a_def_returning_a_coroutine_is_refused_at_its_first_call_and_leaves_no_record() -> None:
    """Regression: a def that returns a coroutine without saying so cannot be told at
    decoration; its first call stored an unstorable marker, so every retry failed with "could
    not be stored". Now the call that returns the coroutine raises `IdempotencyConfigError`,
    the coroutine is closed unrun (no "never awaited" warning) and the claim is released."""
    store = InMemoryPersistenceLayer()
    runs = Runs()

    async def work(event: Any) -> dict[str, Any]:
        runs(event)
        return {"done": True}

    @idempotent(persistence_store=store)
    def handler(event: Any, context: Any) -> Any:
        return work(event)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a coroutine left unawaited would warn
        for _ in range(2):
            with pytest.raises(IdempotencyConfigError, match="coroutine"):
                handler({"id": 1}, None)
    assert 0 == runs.count
    assert {} == store._records


def test_an_async_def_is_still_accepted() -> None:
    """The refusal is for def functions; ``async def`` handlers are decorated as before."""

    @idempotent(persistence_store=InMemoryPersistenceLayer())
    async def handler(event: Any, context: Any) -> dict[str, Any]:
        return await _work(event)

    assert {"done": 1} == asyncio.run(handler(1, None))


BARE = {
    "idempotent": (idempotent, "@idempotent(persistence_store=...)"),
    "idempotent_function": (
        idempotent_function,
        "@idempotent_function(data_keyword_argument=..., persistence_store=...)",
    ),
    "idempotent_http": (idempotent_http, "@idempotent_http(persistence_store=...)"),
    "idempotent_sqs_handler": (
        idempotent_sqs_handler,
        "@idempotent_sqs_handler(persistence_store=...)",
    ),
    "idempotent_stream_handler": (
        idempotent_stream_handler,
        "@idempotent_stream_handler(persistence_store=...)",
    ),
    "idempotent_kinesis_handler": (
        idempotent_kinesis_handler,
        "@idempotent_kinesis_handler(persistence_store=...)",
    ),
    "idempotent_kafka_handler": (
        idempotent_kafka_handler,
        "@idempotent_kafka_handler(persistence_store=...)",
    ),
}


@pytest.mark.parametrize(("decorator", "usage"), BARE.values(), ids=BARE)
def test_a_decorator_used_without_parentheses_says_how_to_call_it(
    decorator: Decorator, usage: str
) -> None:
    """Regression: ``@idempotent`` without parentheses raised Python's "takes 0 positional
    arguments but 1 was given". The TypeError now shows the call with its options."""

    def handler(event: Any, context: Any) -> int:
        return 1

    with pytest.raises(TypeError) as refused:
        decorator(handler)
    assert usage in str(refused.value)
    assert "parentheses" in str(refused.value)


def test_the_decorators_keep_their_signatures() -> None:
    """The check leaves the keyword-only signature in place for tools that read it."""
    import inspect

    parameters = inspect.signature(idempotent).parameters
    assert ["persistence_store", "config", "key_prefix"] == list(parameters)
    assert {inspect.Parameter.KEYWORD_ONLY} == {p.kind for p in parameters.values()}
