"""The hot paths leave no reference cycles: everything an invocation allocates is freed at once.

A cycle would keep a parsed event body alive until the garbage collector runs, and the collector
would then bill the time to some later invocation.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from typing import Any

import pytest

from idempotent_lambda import IdempotencyConfig, InMemoryPersistenceLayer, idempotent
from idempotent_lambda.testing import FakeLambdaContext


@pytest.fixture
def collector_paused() -> Iterator[None]:
    """Collect, then keep the collector off so the test can count what it would free."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("validation", ["", "powertools_json(body)"])
@pytest.mark.parametrize("cached", [False, True])
def test_first_calls_and_replays_leave_no_cycles(
    collector_paused: None, lambda_context: FakeLambdaContext, validation: str, cached: bool
) -> None:
    """First calls, store replays and cache replays free all they allocate by reference count."""
    config = IdempotencyConfig(
        event_key_jmespath="powertools_json(body).order_id",
        payload_validation_jmespath=validation,
        use_local_cache=cached,
    )

    @idempotent(persistence_store=InMemoryPersistenceLayer(), config=config)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": 201, "body": event["body"]}

    events = [
        {"body": json.dumps({"order_id": f"o-{n % 5}", "lines": [{"price": 4.0, "qty": n % 5}]})}
        for n in range(50)
    ]
    responses = [handler(event, lambda_context) for event in events]

    assert 0 == gc.collect()
    assert 5 == len({response["body"] for response in responses})  # 5 keys: runs and replays
