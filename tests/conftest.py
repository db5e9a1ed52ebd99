"""Settings shared by every test layer: hypothesis profiles, no Lambda context registered
across tests, a port that refuses connections, one OpenTelemetry tracer provider per process.

The default profile is derandomised and has no per-example deadline, so a run is reproducible
and a loaded machine cannot fail a property by being slow. ``HYPOTHESIS_PROFILE=explore`` asks
for fresh random examples (and more of them) when hunting for bugs locally.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
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


@pytest.fixture(scope="session", autouse=True)
def session_tracer_provider() -> Any:
    """Set the process's one OpenTelemetry tracer provider before its first test (tests/_otel).

    OpenTelemetry lets a process set its provider once: setting it first, whichever test runs
    first, makes every test see the same provider in any order. None when the SDK is not
    installed, or in a child process run by a ``no_tracer_provider`` test.
    """
    try:
        from tests._otel import NO_PROVIDER, install_once
    except (ImportError, pytest.skip.Exception):
        return None
    if os.environ.get(NO_PROVIDER):
        return None
    return install_once()


@pytest.fixture
def traces() -> Iterator[Any]:
    """Collect the test's spans of the real OpenTelemetry SDK in memory (tests/_otel)."""
    from tests._otel import collecting

    yield from collecting()


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run a ``no_tracer_provider`` test in a child pytest process with no provider set, when
    this process has one (a provider, once set, cannot be unset)."""
    if pyfuncitem.get_closest_marker("no_tracer_provider") is None:
        return None
    from idempotent_lambda._tracing import tracer

    if tracer() is None:  # no provider here: the test runs as it is
        return None
    from tests._otel import NO_PROVIDER

    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", pyfuncitem.nodeid],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        cwd=pyfuncitem.config.rootpath,
        env={**os.environ, NO_PROVIDER: "1"},
    )
    assert 0 == done.returncode, done.stdout + done.stderr
    summary = done.stdout.strip().splitlines()[-1]
    assert summary.startswith("1 passed in "), done.stdout  # it ran: not skipped, not deselected
    return True
