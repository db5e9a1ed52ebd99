"""Fixtures for tests against dynalite, a DynamoDB implementation independent of moto.

dynalite (npm) runs under node on 127.0.0.1 with a free port, in memory, once per session.
``make dynalite`` installs it into ``.cache/dynalite`` (``make test`` does it first); one on PATH
(``npm install -g dynalite``) is used otherwise. Without node or dynalite the tests skip, saying so.

What dynalite lacks, and what the tests do about it:
- a failed conditional write never carries the item (``ReturnValuesOnConditionCheckFailure``
  is ignored): the store's fallback read is what these tests exercise;
- no ``TransactWriteItems`` and no TTL: tests that need them are not run here.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from idempotent_lambda.persistence.dynamodb._operator import create_idempotency_table

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

#: Where ``make dynalite`` installs it (the repository's root is two levels up).
LOCAL_INSTALL = Path(__file__).resolve().parents[2] / ".cache/dynalite/node_modules/dynalite"
START_TIMEOUT_S = 30


def dynalite_command() -> list[str]:
    """Return the command that runs dynalite, or skip the test saying what is missing."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed, so dynalite cannot run (apt-get install -y nodejs)")
    if (LOCAL_INSTALL / "cli.js").is_file():
        return [node, str(LOCAL_INSTALL / "cli.js")]
    installed = shutil.which("dynalite")
    if installed is None:
        pytest.skip(
            "dynalite is not installed: run `make dynalite` (npm) or npm install -g dynalite"
        )
    return [installed]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
        return True
    return False


def start_dynalite() -> tuple[subprocess.Popen[bytes], int]:
    """Start dynalite in memory on a free loopback port; return it once it accepts connections.

    Tables become ACTIVE at once. Retries with a new port if the first one was taken meanwhile.
    """
    command = dynalite_command()
    for _ in range(3):
        port = _free_port()
        process = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(port), "--createTableMs", "0",
             "--deleteTableMs", "0", "--updateTableMs", "0"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while process.poll() is None and time.monotonic() < deadline:
            if _answers(port):
                return process, port
            time.sleep(0.05)
        _stop(process)
    pytest.fail("dynalite did not start on 127.0.0.1")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


@pytest.fixture(scope="session")
def dynalite_endpoint() -> Iterator[str]:
    """Start the session's dynalite; yield its endpoint URL."""
    process, port = start_dynalite()
    yield f"http://127.0.0.1:{port}"
    _stop(process)


@pytest.fixture
def dynalite_client(dynalite_endpoint: str, aws_environment: None) -> DynamoDBClient:
    """Return a ``dynamodb`` client on dynalite, with dummy credentials."""
    return boto3.session.Session().client(
        "dynamodb",
        endpoint_url=dynalite_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@pytest.fixture
def make_dynalite_table(dynalite_client: DynamoDBClient) -> Iterator[Callable[..., str]]:
    """Yield a factory of fresh idempotency tables on dynalite (as ``make_table`` on moto)."""
    created: list[str] = []

    def make(**options: Any) -> str:
        name = f"idempotency-{uuid.uuid4().hex[:12]}"
        create_idempotency_table(dynalite_client, table_name=name, **options)
        created.append(name)
        return name

    yield make
    for name in created:
        with contextlib.suppress(dynalite_client.exceptions.ResourceNotFoundException):
            dynalite_client.delete_table(TableName=name)
