"""pytest fixtures for testing idempotent handlers; registered through the `pytest11` entry point.

Fixtures:
    idempotency_clock: A `ManualClock` shared by the store and the context.
    idempotency_store: An `InMemoryPersistenceLayer` on that clock, fresh per test.
    lambda_context: A `FakeLambdaContext` with 30 s remaining on that clock.

The store and context fixtures forget any context the test registered with
`config.register_lambda_context` when the test ends: the registration is process-wide, and
a context on a `ManualClock` never runs out of time, so it would leak into the next test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from idempotent_lambda._lambda_context import register
from idempotent_lambda.persistence.in_memory import InMemoryPersistenceLayer
from idempotent_lambda.testing import FakeLambdaContext, ManualClock


@pytest.fixture
def idempotency_clock() -> ManualClock:
    """Return a clock that moves only when the test says so."""
    return ManualClock()


@pytest.fixture
def idempotency_store(idempotency_clock: ManualClock) -> Iterator[InMemoryPersistenceLayer]:
    """Return an empty in-memory store on the test's clock."""
    yield InMemoryPersistenceLayer(clock=idempotency_clock)
    register(None)


@pytest.fixture
def lambda_context(idempotency_clock: ManualClock) -> Iterator[FakeLambdaContext]:
    """Return a Lambda context with 30 seconds remaining on the test's clock."""
    yield FakeLambdaContext(30_000, clock=idempotency_clock)
    register(None)
