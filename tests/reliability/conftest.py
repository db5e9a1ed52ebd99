"""Fixtures of the reliability suite (issue 5): moto server, log hygiene, opt-in slow runs.

The DynamoDB fixtures (and `redis_port`) are the integration suite's, imported and re-exported
here, so both suites talk to a moto server or a redis-server on 127.0.0.1 the same way.

Every test here runs under `log_hygiene`: all log records emitted while it runs (the library's at
DEBUG, everything else at INFO) are captured with their ``extra`` fields and tracebacks, and the
test fails if `SECRET` appears in any of them. Tests plant `SECRET` in payloads and results.

Tests marked ``slow`` (the full-size load runs, the large hypothesis budgets) are skipped unless
the run selects them: ``pytest -m slow tests/reliability``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration._redis_server import redis_port
from tests.integration.conftest import (
    ENDPOINT_ENV,
    _boto3_session,
    aws_environment,
    dynamodb_client,
    dynamodb_endpoint,
    dynamodb_store,
    idempotency_table,
    make_table,
)
from tests.reliability._support import SECRET

__all__ = [  # the integration suite's fixtures, used here too
    "_boto3_session",
    "aws_environment",
    "dynamodb_client",
    "dynamodb_endpoint",
    "dynamodb_store",
    "idempotency_table",
    "make_table",
    "redis_port",
]

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip this suite's ``slow`` tests unless the ``-m`` expression asks for them."""
    if "slow" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason="long run: opt in with `pytest -m slow tests/reliability`")
    for item in items:
        if _HERE in item.path.parents and item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


class _Capture(logging.Handler):
    """Keep the full text of every record: message, ``extra`` fields, traceback, stack."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.texts: list[str] = []
        self.records = 0
        self._formatter = logging.Formatter()
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        parts = [record.getMessage(), repr(record.__dict__)]
        if record.exc_info:
            parts.append(self._formatter.formatException(record.exc_info))
        if record.stack_info:
            parts.append(record.stack_info)
        with self._guard:
            self.texts.append("\n".join(parts))
            self.records += 1


@pytest.fixture(autouse=True)
def log_hygiene() -> Iterator[_Capture]:
    """Capture all log output of the test and fail it if `SECRET` appears anywhere in it."""
    capture = _Capture()
    root = logging.getLogger()
    library = logging.getLogger("idempotent_lambda")
    saved = root.level, library.level
    root.addHandler(capture)
    root.setLevel(logging.INFO)
    library.setLevel(logging.DEBUG)
    try:
        yield capture
    finally:
        root.removeHandler(capture)
        root.setLevel(saved[0])
        library.setLevel(saved[1])
    leaks = [text for text in capture.texts if SECRET in text]
    assert [] == leaks, f"{len(leaks)} log record(s) contain the planted secret"


@pytest.fixture
def serialised_moto(monkeypatch: pytest.MonkeyPatch, dynamodb_endpoint: str) -> None:
    """Make the in-process moto server apply writes one at a time, as DynamoDB does per item.

    moto's server checks a condition and writes in the request thread without a lock, so two
    racing conditional ``PutItem`` calls can both succeed (see tests/integration/
    test_concurrency.py). DynamoDB serialises writes to an item; this gives moto that guarantee,
    so the load runs measure the library and not moto. No effect on an external endpoint.
    """
    if os.environ.get(ENDPOINT_ENV):
        return
    from moto.dynamodb.models import DynamoDBBackend

    lock = threading.Lock()
    for name in ("put_item", "update_item", "delete_item"):
        original = getattr(DynamoDBBackend, name)

        def serialised(*args: Any, __original: Any = original, **kwargs: Any) -> Any:
            with lock:
                return __original(*args, **kwargs)

        monkeypatch.setattr(DynamoDBBackend, name, serialised)
