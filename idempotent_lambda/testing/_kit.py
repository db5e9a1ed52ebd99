"""The test kit's own parts: a clock you move, a Lambda context, a local DynamoDB server.

`idempotent_lambda.testing` re-exports them with the event builders.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from idempotent_lambda._clock import SYSTEM_CLOCK, Clock


class ManualClock:
    """A clock that only moves when told to; thread-safe.

    Args:
        start_ms: The initial time, epoch milliseconds.
    """

    def __init__(self, start_ms: int = 1_767_225_600_000) -> None:
        self._now_ms = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        """Return the current (manual) time in epoch milliseconds."""
        with self._lock:
            return self._now_ms

    def advance(self, seconds: float = 0, *, ms: int = 0) -> int:
        """Move time forward and return the new time in epoch milliseconds."""
        with self._lock:
            self._now_ms += int(seconds * 1000) + ms
            return self._now_ms

    def set(self, now_ms: int) -> None:
        """Jump to `now_ms` (backwards too, to simulate a skewed instance)."""
        with self._lock:
            self._now_ms = now_ms


class FakeLambdaContext:
    """A stand-in for the Lambda context object, with a deadline you control.

    Remaining time is measured on `clock`, so advancing a `ManualClock` brings the deadline
    closer exactly as it would in Lambda.

    Args:
        timeout_ms: Remaining time at construction.
        clock: Time source; the wall clock by default.
        function_name: Reported as `function_name` and in the function ARN.
    """

    def __init__(
        self,
        timeout_ms: int = 30_000,
        *,
        clock: Clock = SYSTEM_CLOCK,
        function_name: str = "test-function",
        memory_limit_in_mb: int = 128,
    ) -> None:
        self._clock = clock
        self._deadline_ms = clock.now_ms() + timeout_ms
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = memory_limit_in_mb
        self.invoked_function_arn = (
            f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
        )
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "2026/01/01/[$LATEST]test"

    def get_remaining_time_in_millis(self) -> int:
        """Return the milliseconds left before the deadline (never negative)."""
        return max(self._deadline_ms - self._clock.now_ms(), 0)

    def set_remaining_ms(self, remaining_ms: int) -> None:
        """Move the deadline so that `remaining_ms` are left from now."""
        self._deadline_ms = self._clock.now_ms() + remaining_ms


_moto_lock = threading.Lock()
_moto_patched = False


def serialise_moto_writes() -> None:
    """Make moto's DynamoDB apply writes to its tables one at a time, as DynamoDB does per item.

    moto checks a `ConditionExpression` and writes the item in the request thread without a
    lock, so under real concurrency (moto's threaded server mode) two racing conditional writes
    can both succeed — about once in a thousand races. DynamoDB never allows that. Call this once
    before starting an in-process moto server (`ThreadedMotoServer`) for concurrency tests so
    they test your code rather than moto. Idempotent; affects only the current process.
    """
    global _moto_patched  # noqa: PLW0603 - a process-wide, once-only patch of a third-party class
    with _moto_lock:
        if _moto_patched:
            return
        from moto.dynamodb.models import DynamoDBBackend

        writes_lock = threading.RLock()
        for name in ("put_item", "update_item", "delete_item", "transact_write_items"):
            original = getattr(DynamoDBBackend, name, None)
            if original is None:
                continue

            def serialised(*args: Any, __original: Any = original, **kwargs: Any) -> Any:
                with writes_lock:
                    return __original(*args, **kwargs)

            setattr(DynamoDBBackend, name, serialised)
        _moto_patched = True


@contextmanager
def local_dynamodb() -> Iterator[str]:
    """Run moto's DynamoDB-compatible server on 127.0.0.1 (a free port) and yield its URL.

    Real HTTP and real conditional-write evaluation, no AWS account: for integration tests and
    local runs. Writes are serialised as DynamoDB serialises them (`serialise_moto_writes`) and
    the server's per-request access log is silenced. Needs `moto[server]`. Point clients at the
    URL with `endpoint_url=`, `AWS_ENDPOINT_URL_DYNAMODB`, or `AWS_ENDPOINT_URL` for every
    service, with any dummy credentials: the same URL serves every service moto emulates, the
    table's DynamoDB Stream, S3, EventBridge and SQS among them.

    Raises:
        ImportError: moto's server is not installed; `pip install 'idempotent-lambda[testing]'`.
    """
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        raise ImportError(
            "local_dynamodb() needs moto's server: pip install 'idempotent-lambda[testing]'"
        ) from exc

    access_log = logging.getLogger("werkzeug")
    previous_level = access_log.level
    access_log.setLevel(logging.ERROR)
    serialise_moto_writes()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        access_log.setLevel(previous_level)
