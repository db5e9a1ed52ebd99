"""The per-function, per-process LRU of completed records."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyConfig,
    IdempotencyValidationError,
    InMemoryPersistenceLayer,
    idempotent,
)
from idempotent_lambda._recording import LocalCache
from idempotent_lambda.record import IdempotencyRecord, Status
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests.unit._doubles import Decisions, Runs, SpyStore


def make_handler(
    store: Any, config: IdempotencyConfig, runs: Runs | None = None, prefix: str = "orders"
) -> Any:
    """Return an idempotent handler counting its runs."""
    counter = runs if runs is not None else Runs()

    @idempotent(persistence_store=store, config=config, key_prefix=prefix)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"id": event["id"], "run": counter(event)}

    return handler


def test_cache_hit_makes_no_store_call(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
) -> None:
    """Once completed, a repeat is answered from the cache with zero round trips."""
    store = SpyStore(idempotency_store)
    config = IdempotencyConfig(use_local_cache=True, decision_hook=decisions)
    handler = make_handler(store, config)

    first = handler({"id": 1}, lambda_context)
    calls_after_first = store.total_calls
    replay = handler({"id": 1}, lambda_context)

    assert first == replay
    assert 2 == calls_after_first
    assert 2 == store.total_calls
    assert ("cache", 0) == (decisions.last.source, decisions.last.store_calls)


def test_store_replay_fills_the_cache(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A result replayed from the store is cached: the next repeat costs nothing."""
    make_handler(idempotency_store, IdempotencyConfig())({"id": 1}, lambda_context)
    store = SpyStore(idempotency_store)
    handler = make_handler(store, IdempotencyConfig(use_local_cache=True))

    handler({"id": 1}, lambda_context)
    handler({"id": 1}, lambda_context)

    assert {"claim": 1} == dict(store.calls)


def test_least_recently_used_record_is_evicted(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Beyond ``local_cache_max_items`` the least recently used record leaves the cache."""
    store = SpyStore(idempotency_store)
    handler = make_handler(store, IdempotencyConfig(use_local_cache=True, local_cache_max_items=2))
    for order_id in (1, 2):
        handler({"id": order_id}, lambda_context)
    handler({"id": 1}, lambda_context)  # 1 is now the most recently used
    handler({"id": 3}, lambda_context)  # evicts 2
    store.calls.clear()

    handler({"id": 1}, lambda_context)
    handler({"id": 3}, lambda_context)
    cached = store.total_calls
    handler({"id": 2}, lambda_context)

    assert 0 == cached
    assert {"claim": 1} == dict(store.calls)


def test_expired_records_are_not_served_from_the_cache(
    idempotency_clock: ManualClock, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """After ``expires_after_seconds`` the cached result is dropped and the body runs again."""
    runs = Runs()
    config = IdempotencyConfig(use_local_cache=True, expires_after_seconds=30)
    handler = make_handler(idempotency_store, config, runs)

    handler({"id": 1}, FakeLambdaContext(clock=idempotency_clock))
    idempotency_clock.advance(30)
    handler({"id": 1}, FakeLambdaContext(clock=idempotency_clock))
    idempotency_clock.advance(1)
    handler({"id": 1}, FakeLambdaContext(clock=idempotency_clock))

    assert 2 == runs.count


def test_each_function_has_its_own_cache(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Two functions sharing keys and a store do not share a cache."""
    store = SpyStore(idempotency_store)
    config = IdempotencyConfig(use_local_cache=True)
    first = make_handler(store, config, prefix="shared")
    second = make_handler(store, config, prefix="shared")

    first({"id": 1}, lambda_context)
    store.calls.clear()
    second({"id": 1}, lambda_context)
    second_first_call = dict(store.calls)
    first({"id": 1}, lambda_context)
    second({"id": 1}, lambda_context)

    assert {"claim": 1} == second_first_call
    assert {"claim": 1} == dict(store.calls)


def test_cached_records_are_validated(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A cache hit with a different validated payload raises, with no store call."""
    store = SpyStore(idempotency_store)
    config = IdempotencyConfig(
        event_key_jmespath="id", payload_validation_jmespath="amount", use_local_cache=True
    )
    handler = make_handler(store, config)

    handler({"id": 1, "amount": 5}, lambda_context)
    store.calls.clear()
    with pytest.raises(IdempotencyValidationError):
        handler({"id": 1, "amount": 6}, lambda_context)

    assert 0 == store.total_calls


def test_failed_and_in_progress_calls_are_not_cached(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Only COMPLETED records are cached: after a failure the retry goes to the store."""
    store = SpyStore(idempotency_store)
    attempts = Runs()

    @idempotent(persistence_store=store, config=IdempotencyConfig(use_local_cache=True))
    def handler(event: dict[str, Any], context: Any) -> str:
        if attempts(event) == 1:
            raise RuntimeError("first attempt fails")
        return "ok"

    with pytest.raises(RuntimeError):
        handler({"id": 1}, lambda_context)
    handler({"id": 1}, lambda_context)

    assert 2 == attempts.count
    assert {"claim": 2, "release": 1, "complete": 1} == dict(store.calls)


def test_cache_ignores_records_that_are_not_completed() -> None:
    """``put`` keeps COMPLETED records only."""
    cache = LocalCache(4)

    cache.put(IdempotencyRecord("k", Status.IN_PROGRESS, expiry_timestamp=10**10))

    assert 0 == len(cache)


def test_cache_is_thread_safe(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Many threads hitting, filling and evicting one small cache get correct results."""
    config = IdempotencyConfig(use_local_cache=True, local_cache_max_items=8)
    handler = make_handler(idempotency_store, config)
    for order_id in range(32):
        handler({"id": order_id}, lambda_context)
    expected = {order_id: handler({"id": order_id}, lambda_context) for order_id in range(32)}
    wrong: list[Any] = []
    errors: list[BaseException] = []

    def worker(offset: int) -> None:
        try:
            for step in range(300):
                order_id = (offset * 7 + step) % 32
                result = handler({"id": order_id}, lambda_context)
                if result != expected[order_id]:
                    wrong.append(result)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert [] == errors
    assert [] == wrong
