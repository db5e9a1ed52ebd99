"""Small helpers shared by the reliability tests."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from idempotent_lambda import IdempotencyConfig
from idempotent_lambda._identity import derive_invocation

#: Planted in payloads and results; must never reach a log record (see conftest.log_hygiene).
SECRET = "s3cr3t-7f1d9c2b-planted-in-payloads-and-results"
#: Longest any single example or call may run before it counts as a hang; generous, so that
#: only a hang, never a loaded machine, exhausts it.
WATCHDOG_S = 60


class Executions:
    """Count body executions per key, thread-safely."""

    def __init__(self) -> None:
        self.by_key: dict[Any, int] = {}
        self._lock = threading.Lock()

    def __call__(self, key: Any) -> int:
        with self._lock:
            self.by_key[key] = self.by_key.get(key, 0) + 1
            return self.by_key[key]

    @property
    def total(self) -> int:
        """Return all executions counted."""
        with self._lock:
            return sum(self.by_key.values())


def stored_key(config: IdempotencyConfig, event: Any, prefix: str) -> str:
    """Return the idempotency key the decorators derive for ``event`` under ``prefix``."""
    invocation = derive_invocation(config, event, prefix=prefix, now_ms=0, context=None)
    assert invocation is not None
    return invocation.key


def outcome_of(call: Callable[[], Any]) -> tuple[str, Any]:
    """Run ``call``; return ``("result", value)`` or ``(exception class name, exception)``."""
    try:
        return "result", call()
    except Exception as exc:
        return type(exc).__name__, exc


@contextlib.contextmanager
def watchdog(seconds: int = WATCHDOG_S) -> Iterator[None]:
    """Fail the enclosed code (an example) if it runs longer than ``seconds``."""

    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError(f"hang: an example ran for more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
