"""Fixtures for tests against a real ``redis-server`` on loopback (imported by the conftest).

The server starts once per session on 127.0.0.1 with a free port, in a temporary directory,
without persistence, and is stopped at the end of the session. Tests skip, naming the reason,
when ``redis-server`` or redis-py is not installed (``.ci/run`` installs the server).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from idempotent_lambda.persistence.redis import RedisCachePersistenceLayer

START_TIMEOUT_S = 30


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start_redis_server(directory: Path, *extra: str) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``redis-server`` on a free loopback port; return the process once it answers PING.

    Retries with a new port if the first one was taken in the meantime.
    """
    executable = shutil.which("redis-server")
    if executable is None:
        pytest.skip("redis-server is not installed (apt-get install -y redis-server)")
    redis = pytest.importorskip("redis", reason="redis-py is not installed (pip install redis)")
    for _ in range(3):
        port = free_port()
        process = subprocess.Popen(
            [executable, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
             "--save", "", "--appendonly", "no", "--daemonize", "no", *extra],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while process.poll() is None and time.monotonic() < deadline:
            try:
                redis.Redis(host="127.0.0.1", port=port, socket_timeout=1).ping()
                return process, port
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        stop(process)
    pytest.fail("redis-server did not start on 127.0.0.1")


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a server started by `start_redis_server` and wait for it."""
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


@pytest.fixture(scope="session")
def redis_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """Start the session's ``redis-server``; yield its port on 127.0.0.1."""
    process, port = start_redis_server(tmp_path_factory.mktemp("redis"))
    yield port
    stop(process)


@pytest.fixture
def redis_client(redis_port: int) -> Iterator[Any]:
    """Return a redis-py client on an emptied database (the default: bytes replies)."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=redis_port)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture
def redis_store(redis_client: Any) -> RedisCachePersistenceLayer:
    """Return a `RedisCachePersistenceLayer` on the emptied test database."""
    return RedisCachePersistenceLayer(client=redis_client)
