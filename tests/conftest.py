"""Settings shared by every test layer: hypothesis profiles, no Lambda context registered
across tests, a port that refuses connections.

The default profile is derandomised and has no per-example deadline, so a run is reproducible
and a loaded machine cannot fail a property by being slow. ``HYPOTHESIS_PROFILE=explore`` asks
for fresh random examples (and more of them) when hunting for bugs locally.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from idempotent_lambda import IdempotencyConfig

settings.register_profile(
    "reproducible",
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile(
    "explore",
    derandomize=False,
    deadline=None,
    max_examples=1000,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "reproducible"))


@pytest.fixture(autouse=True)
def no_registered_lambda_context() -> Iterator[None]:
    """Forget any process-wide ``register_lambda_context`` before and after each test.

    The registration outlives the test that made it (as it outlives a Lambda invocation), so
    without this a test's leases would depend on which tests ran before it.
    """
    IdempotencyConfig().register_lambda_context(None)
    yield
    IdempotencyConfig().register_lambda_context(None)


@pytest.fixture
def refused_port() -> Iterator[int]:
    """Yield a loopback port that refuses every connection until the test ends.

    The port stays bound (never listening) for the whole test: a port merely found free and
    closed again could be taken meanwhile by another process's server, or picked as the
    client's own ephemeral port (a TCP self-connect), and then the connection would not fail.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        yield int(holder.getsockname()[1])


@pytest.fixture
def traces(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Trace the test with the real OpenTelemetry SDK, its spans kept in memory (tests/_otel)."""
    from tests._otel import install

    return install(monkeypatch)
