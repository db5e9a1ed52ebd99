"""Fixtures for the unit tests; the store, clock and context fixtures come from the plugin."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from idempotent_lambda._lambda_context import current_lambda_context, register
from tests.unit._doubles import Decisions
from tests.unit._modes import Mode


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run each test with idempotency enabled, no function name and no bound or registered
    Lambda context."""
    for name in (
        "IDEMPOTENCY_DISABLED",
        "POWERTOOLS_IDEMPOTENCY_DISABLED",
        "AWS_LAMBDA_FUNCTION_NAME",
    ):
        monkeypatch.delenv(name, raising=False)
    token = current_lambda_context.set(None)
    register(None)
    yield
    register(None)
    current_lambda_context.reset(token)


@pytest.fixture
def decisions() -> Decisions:
    """Return a decision hook that records every decision."""
    return Decisions()


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> Mode:
    """Return how the test decorates and calls its function: ``def`` or ``async def``."""
    return Mode(request.param)
