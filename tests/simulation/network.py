"""The simulated world's plumbing: botocore clients whose requests the world decides, the
bound botocore really keeps to, simulated sleeps, and one-at-a-time thread pools.

Every client the library gets here is a real botocore client on moto's server with a
``before-send`` hook: the world (`world.World.on_send`) sends the request itself, or fails it,
holds it, or loses its reply. Clients are built once per process and reused by every run (their
hook asks whichever world is running).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from typing import Any

#: The botocore settings a store's client may have, by the name a `program.Setup` uses.
#: ``library``: what `DynamoDBPersistenceLayer` builds for itself; ``defaults``: a client built
#: with no settings (botocore's default retry mode: standard since botocore 1.36, legacy
#: before; 60 s timeouts); ``legacy-fast``: legacy mode, DynamoDB's 10 attempts and uncapped
#: backoff, with lowered timeouts.
CLIENT_CONFIGS: dict[str, dict[str, Any]] = {
    "library": {
        "retries": {"total_max_attempts": 3, "mode": "standard"},
        "connect_timeout": 2,
        "read_timeout": 3,
    },
    "defaults": {},
    "legacy-fast": {"connect_timeout": 1, "read_timeout": 1, "retries": {"mode": "legacy"}},
}


class Crash(Exception):  # noqa: N818 - what happened, not an error of the code
    """The invocation died (a crash, or Lambda ending it at its deadline): nothing more of it
    reaches the network, and no body of it runs.

    An `Exception`, not a `BaseException`: what the library does with it afterwards happens
    in a process Lambda has already ended, so only its requests matter, and `on_send` refuses
    them all. (A `BaseException` would leave the library's generators suspended.)
    """


_Hook = Callable[[Any, str, Any], Any]
_ACTIVE: list[_Hook] = []  # the running world's hook, if any
_CLIENTS: dict[tuple[str, str, str, int], Any] = {}


def client(service: str, endpoint: str, settings: str, env: int) -> Any:
    """Return environment ``env``'s ``service`` client with the named settings (cached)."""
    cache_key = (service, endpoint, settings, env)
    if cache_key not in _CLIENTS:
        import boto3
        from botocore.config import Config

        built = boto3.session.Session().client(
            service,
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(
                **CLIENT_CONFIGS[settings],
                **({"s3": {"addressing_style": "path"}} if service == "s3" else {}),
            ),
        )
        if env >= 0:  # the world's own observers are not part of the simulated network
            built.meta.events.register(f"before-send.{service}", _dispatch(built))
        _CLIENTS[cache_key] = built
    return _CLIENTS[cache_key]


def _dispatch(built: Any) -> Callable[..., Any]:
    def before_send(request: Any, event_name: str = "", **_: Any) -> Any:
        if not _ACTIVE:
            return None
        target = request.headers.get("X-Amz-Target", b"")
        if isinstance(target, bytes):
            target = target.decode()
        # A JSON service names the operation in its target; S3 only in the event's name.
        operation = target.rpartition(".")[2] or event_name.rpartition(".")[2]
        return _ACTIVE[-1](request, operation, built)

    return before_send


@contextlib.contextmanager
def active(hook: _Hook) -> Iterator[None]:
    """Route every simulated client's requests to ``hook`` while the block runs."""
    _ACTIVE.append(hook)
    try:
        yield
    finally:
        _ACTIVE.remove(hook)


def true_bound_ms(settings: str) -> int:
    """Return the longest one request of a client with ``settings`` can take, as the botocore
    installed here really behaves for DynamoDB (its retry mode as the client resolved it, and
    its retry tables; not the library's reading).

    Legacy mode: DynamoDB's own 10 attempts and its uncapped backoff (50 ms doubling). Standard
    mode: DynamoDB's 4 attempts, up to 20 s of backoff per retry plus up to 5 s more for
    ``x-amz-retry-after``.
    """
    config = CLIENT_CONFIGS[settings]
    connect = config.get("connect_timeout", 60)
    read = config.get("read_timeout", 60)
    retries = client("dynamodb", "http://127.0.0.1:9", settings, -2).meta.config.retries or {}
    attempts = retries.get("total_max_attempts")
    if attempts is None and retries.get("max_attempts") is not None:
        attempts = retries["max_attempts"] + 1
    if retries.get("mode", "legacy") == "legacy":
        attempts = attempts or 10
        backoff = sum(0.05 * 2**n for n in range(attempts - 1))
    else:
        attempts = attempts or 4
        backoff = sum(min(2**n, 20) + 5 for n in range(attempts - 1))
    return int((attempts * (connect + read) + backoff) * 1000)


def attempt_ms(settings: str) -> int:
    """Return the longest one attempt may take (its connect and read timeouts)."""
    config = CLIENT_CONFIGS[settings]
    return int((config.get("connect_timeout", 60) + config.get("read_timeout", 60)) * 1000)


class InlineExecutor(Executor):
    """A pool that runs each task to its end when it is handed out: one schedule of the many a
    thread pool allows, and the same on every run."""

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:
            future.set_exception(exc)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass


class SimulatedTime:
    """Stands in for the ``time`` module where the library sleeps: a sleep moves the world's
    clock instead of the thread; botocore's own backoff (jittered) takes no simulated time."""

    def __init__(self, advance: Callable[[int], None], now_ms: Callable[[], int]) -> None:
        self._advance = advance
        self._now_ms = now_ms

    def sleep(self, seconds: float) -> None:
        self._advance(int(seconds * 1000))

    def monotonic(self) -> float:
        return self._now_ms() / 1000

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


class _NoSleep:
    def sleep(self, seconds: float) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


#: Modules whose ``time`` is simulated, and whose thread pools run inline.
SLEEPERS = (
    "idempotent_lambda.adapters._batch_completions",
    "idempotent_lambda.adapters._batch_lanes",
    "idempotent_lambda.persistence.dynamodb._store",
    "idempotent_lambda.persistence.dynamodb._outbox",
    "idempotent_lambda.outbox._publisher",
    "idempotent_lambda._effects",
)
POOLS = ("idempotent_lambda.adapters._batch_completions", "idempotent_lambda.outbox._publisher")


@contextlib.contextmanager
def simulated(advance: Callable[[int], None], now_ms: Callable[[], int]) -> Iterator[None]:
    """Patch the library's sleeps, botocore's backoff and the library's pools for one run."""
    import importlib

    saved: list[tuple[Any, str, Any]] = []

    def patch(module: Any, name: str, value: Any) -> None:
        saved.append((module, name, getattr(module, name)))
        setattr(module, name, value)

    try:
        for name in SLEEPERS:
            module = importlib.import_module(name)
            if hasattr(module, "time"):
                patch(module, "time", SimulatedTime(advance, now_ms))
        for name in POOLS:
            patch(importlib.import_module(name), "ThreadPoolExecutor", InlineExecutor)
        patch(importlib.import_module("botocore.endpoint"), "time", _NoSleep())
        yield
    finally:
        for module, name, value in reversed(saved):
            setattr(module, name, value)


def error_response(request: Any, status: int, code: str) -> Any:
    """Return a DynamoDB-shaped error answer for ``request``, as botocore receives one."""
    body = {"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": "sim"}
    return json_response(request, body, status)


def json_response(request: Any, answer: dict[str, Any], status: int = 200) -> Any:
    """Return ``answer`` as the JSON answer to ``request``, as botocore receives one."""
    from botocore.awsrequest import AWSResponse

    body = json.dumps(answer)

    class Raw:
        def stream(self, **_: Any) -> Iterator[bytes]:
            yield body.encode()

    headers = {"Content-Type": "application/x-amz-json-1.0", "x-amzn-RequestId": "sim"}
    return AWSResponse(request.url, status, headers, Raw())
