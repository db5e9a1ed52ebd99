"""`config.register_lambda_context`: the lease of records claimed in any thread of a call."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from idempotent_lambda import (
    IdempotencyConfig,
    InMemoryPersistenceLayer,
    idempotent,
    idempotent_function,
)
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests.unit._doubles import SpyStore, lease_end_ms

FALLBACK_MS = 900_000


def make_process(store: SpyStore, config: IdempotencyConfig) -> Any:
    """Return an `idempotent_function` that records which thread ran it."""

    @idempotent_function(data_keyword_argument="order", persistence_store=store, config=config)
    def process(order: dict[str, Any]) -> str:
        return threading.current_thread().name

    return process


def test_registration_reaches_thread_pool_workers(
    idempotency_clock: ManualClock, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """Records claimed by ThreadPoolExecutor workers get the registered invocation's lease."""
    store = SpyStore(idempotency_store)
    config = IdempotencyConfig()
    process = make_process(store, config)

    def lambda_handler(event: dict[str, Any], context: Any) -> list[str]:
        config.register_lambda_context(context)
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="worker") as pool:
            return list(pool.map(lambda order: process(order=order), event["orders"]))

    orders = [{"id": n} for n in range(8)]
    ran_in = lambda_handler({"orders": orders}, FakeLambdaContext(7_000, clock=idempotency_clock))

    assert all(name.startswith("worker") for name in ran_in)
    expected = [idempotency_clock.now_ms() + 7_000] * len(orders)
    assert expected == [lease_end_ms(claim) for claim in store.claims]


def test_a_context_with_no_time_left_is_not_used(
    idempotency_clock: ManualClock, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """A registration left from a finished invocation (no time left) falls back to 900 s."""
    store = SpyStore(idempotency_store)
    config = IdempotencyConfig()
    process = make_process(store, config)

    config.register_lambda_context(FakeLambdaContext(7_000, clock=idempotency_clock))
    idempotency_clock.advance(ms=7_000)
    process(order={"id": 1})

    assert [idempotency_clock.now_ms() + FALLBACK_MS] == [lease_end_ms(c) for c in store.claims]


def test_config_lambda_context_with_no_time_left_is_not_used(
    idempotency_clock: ManualClock, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """The config's own fallback context follows the same rule."""
    store = SpyStore(idempotency_store)
    config = IdempotencyConfig(lambda_context=FakeLambdaContext(5_000, clock=idempotency_clock))
    process = make_process(store, config)

    idempotency_clock.advance(ms=5_000)
    process(order={"id": 1})

    assert [idempotency_clock.now_ms() + FALLBACK_MS] == [lease_end_ms(c) for c in store.claims]


def test_the_context_a_handler_was_given_wins_over_the_registration(
    idempotency_clock: ManualClock, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """Inside a decorated handler, nested functions use that handler's context."""
    store = SpyStore(idempotency_store)
    config = IdempotencyConfig()
    process = make_process(store, config)
    config.register_lambda_context(FakeLambdaContext(60_000, clock=idempotency_clock))

    @idempotent(persistence_store=store, key_prefix="handler")
    def handler(event: dict[str, Any], context: Any) -> str:
        return str(process(order=event))

    handler({"id": 1}, FakeLambdaContext(5_000, clock=idempotency_clock))

    expected = [idempotency_clock.now_ms() + 5_000] * 2
    assert expected == [lease_end_ms(claim) for claim in store.claims]


def test_registering_none_forgets_the_context(
    idempotency_clock: ManualClock, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """``register_lambda_context(None)`` drops the registration; the lease falls back."""
    store = SpyStore(idempotency_store)
    config = IdempotencyConfig()
    process = make_process(store, config)

    config.register_lambda_context(FakeLambdaContext(7_000, clock=idempotency_clock))
    process(order={"id": 1})
    config.register_lambda_context(None)
    process(order={"id": 2})

    now = idempotency_clock.now_ms()
    assert [now + 7_000, now + FALLBACK_MS] == [lease_end_ms(c) for c in store.claims]


def test_registration_changes_nothing_on_the_config(idempotency_clock: ManualClock) -> None:
    """The config stays frozen and equal; the registration belongs to the invocation."""
    config = IdempotencyConfig()
    before = repr(config)
    context = FakeLambdaContext(clock=idempotency_clock)

    config.register_lambda_context(context)

    assert before == repr(config)
    assert context is IdempotencyConfig().bound_context()
