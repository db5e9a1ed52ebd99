"""pytest fixtures for testing idempotent handlers; registered through the ``pytest11`` entry point.

Fixtures:
    idempotency_clock: A `ManualClock` shared by the store and the context.
    idempotency_store: An `InMemoryPersistenceLayer` on that clock, fresh per test.
    lambda_context: A `FakeLambdaContext` with 30 s remaining on that clock.
"""

from __future__ import annotations

import pytest

from idempotent_lambda.persistence.in_memory import InMemoryPersistenceLayer
from idempotent_lambda.testing import FakeLambdaContext, ManualClock


@pytest.fixture
def idempotency_clock() -> ManualClock:
    """Return a clock that moves only when the test says so."""
    return ManualClock()


@pytest.fixture
def idempotency_store(idempotency_clock: ManualClock) -> InMemoryPersistenceLayer:
    """Return an empty in-memory store on the test's clock."""
    return InMemoryPersistenceLayer(clock=idempotency_clock)


@pytest.fixture
def lambda_context(idempotency_clock: ManualClock) -> FakeLambdaContext:
    """Return a Lambda context with 30 seconds remaining on the test's clock."""
    return FakeLambdaContext(30_000, clock=idempotency_clock)
