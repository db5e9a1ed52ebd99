"""The two commands the Redis store sends, over whichever client it was given.

Supported clients: redis-py (``redis.Redis``, ``redis.cluster.RedisCluster``) and its fork
valkey-py, which take ``execute_command``; valkey-glide's synchronous client
(``glide_sync.GlideClient``/``GlideClusterClient``), which takes ``custom_command``; and the
coroutine that valkey-glide's asyncio ``GlideClient.create(...)`` returns, which Powertools'
examples pass as the client. Replies are read as raw bytes whatever the client's
``decode_responses`` says, because compressed results are binary. Client errors become
`IdempotencyPersistenceLayerError` here, at one boundary.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import threading
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal, Protocol

from idempotent_lambda.exceptions import IdempotencyConfigError, IdempotencyPersistenceLayerError

Arg = str | bytes
_ERROR_BASES = (
    ("redis.exceptions", "RedisError"),
    ("valkey.exceptions", "ValkeyError"),
    ("glide_shared.exceptions", "GlideError"),
)


class Commands(Protocol):
    """What the store needs from a client: a script run and a read, raw bytes back."""

    def eval(self, script: str, key: str, args: Sequence[Arg]) -> Any:
        """Run ``script`` with ``KEYS[1] = key`` and ``ARGV = args``; return its reply."""
        ...

    def hgetall(self, key: str) -> dict[bytes, bytes]:
        """Return every field of the hash at ``key`` ({} when there is none)."""
        ...

    def get(self, key: str) -> bytes | None:
        """Return the string at ``key`` (None when there is none)."""

    def set_if_absent(self, key: str, value: str, seconds: int) -> bool:
        """``SET key value EX seconds NX``: True when the key was absent and is now set."""
        ...

    def eval_keys(self, script: str, keys: Sequence[str]) -> Any:
        """Run ``script`` with ``KEYS = keys`` and no arguments; return its reply."""
        ...


class _ExecuteCommand:
    """redis-py and valkey-py clients, standalone or cluster."""

    def __init__(self, client: Any) -> None:
        self._client = client
        # redis-py's (and valkey-py's) option to read one reply undecoded, as its `dump` does.
        self._raw: dict[str, Any] = {"NEVER_DECODE": []}

    def eval(self, script: str, key: str, args: Sequence[Arg]) -> Any:
        return self._client.execute_command("EVAL", script, 1, key, *args, **self._raw)

    def hgetall(self, key: str) -> dict[bytes, bytes]:
        return as_dict(self._client.execute_command("HGETALL", key, **self._raw))

    def get(self, key: str) -> bytes | None:
        reply: bytes | None = self._client.execute_command("GET", key, **self._raw)
        return reply

    def eval_keys(self, script: str, keys: Sequence[str]) -> Any:
        return self._client.execute_command("EVAL", script, len(keys), *keys, **self._raw)

    def set_if_absent(self, key: str, value: str, seconds: int) -> bool:
        return self._client.execute_command("SET", key, value, "EX", seconds, "NX") is not None


class _CustomCommand:
    """valkey-glide's synchronous clients; they always return bytes."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def eval(self, script: str, key: str, args: Sequence[Arg]) -> Any:
        return self._client.custom_command(["EVAL", script, "1", key, *args])

    def hgetall(self, key: str) -> dict[bytes, bytes]:
        return as_dict(self._client.custom_command(["HGETALL", key]))

    def get(self, key: str) -> bytes | None:
        reply: bytes | None = self._client.custom_command(["GET", key])
        return reply

    def eval_keys(self, script: str, keys: Sequence[str]) -> Any:
        return self._client.custom_command(["EVAL", script, str(len(keys)), *keys])

    def set_if_absent(self, key: str, value: str, seconds: int) -> bool:
        command = ["SET", key, value, "EX", str(seconds), "NX"]
        return self._client.custom_command(command) is not None


class _AsyncGlide:
    """valkey-glide's asyncio client, created and driven on an event loop of its own.

    An asyncio client belongs to the loop it was created on, and handlers are synchronous: the
    store runs ``create``'s coroutine on a private loop in a daemon thread and sends every
    command there, waiting for its reply (thread-safe; glide's ``request_timeout`` bounds it).
    """

    def __init__(self, creating: Coroutine[Any, Any, Any]) -> None:
        self._loop = asyncio.new_event_loop()
        threading.Thread(
            target=self._loop.run_forever, name="idempotent-lambda-glide", daemon=True
        ).start()
        try:
            with translated_errors("connect"):
                self._client = self._run(creating)
        except BaseException:
            self._loop.call_soon_threadsafe(self._loop.stop)
            raise

    def _run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def eval(self, script: str, key: str, args: Sequence[Arg]) -> Any:
        return self._run(self._client.custom_command(["EVAL", script, "1", key, *args]))

    def hgetall(self, key: str) -> dict[bytes, bytes]:
        return as_dict(self._run(self._client.custom_command(["HGETALL", key])))

    def get(self, key: str) -> bytes | None:
        reply: bytes | None = self._run(self._client.custom_command(["GET", key]))
        return reply

    def eval_keys(self, script: str, keys: Sequence[str]) -> Any:
        return self._run(self._client.custom_command(["EVAL", script, str(len(keys)), *keys]))

    def set_if_absent(self, key: str, value: str, seconds: int) -> bool:
        command = ["SET", key, value, "EX", str(seconds), "NX"]
        return self._run(self._client.custom_command(command)) is not None


def commands_for(client: Any) -> Commands:
    """Return the `Commands` adapter for ``client``.

    Raises:
        IdempotencyConfigError: The client is an asyncio client created on some other loop, or
            cannot send arbitrary commands (this store needs ``EVAL``; a stub with only
            ``get``/``set``/``delete`` cannot give an atomic claim).
    """
    if inspect.iscoroutine(client):
        if client.__qualname__.endswith("Client.create"):
            return _AsyncGlide(client)
        client.close()  # never awaited: close it so Python does not warn about it
        raise IdempotencyConfigError(f"a coroutine ({client.__qualname__}) is not a client")
    custom = getattr(client, "custom_command", None)
    if inspect.iscoroutinefunction(custom) or inspect.iscoroutinefunction(
        getattr(client, "execute_command", None)
    ):
        raise IdempotencyConfigError(
            "an asyncio client belongs to the event loop it was created on; pass a synchronous"
            " client (or the coroutine valkey-glide's GlideClient.create(...) returns)"
        )
    if custom is not None:
        return _CustomCommand(client)
    if hasattr(client, "execute_command"):
        return _ExecuteCommand(client)
    raise IdempotencyConfigError(
        f"a {type(client).__name__} cannot run Lua scripts; pass a redis-py, valkey-py or"
        " valkey-glide-sync client"
    )


def build_client(
    *,
    url: str,
    host: str,
    port: int,
    username: str,
    password: str,
    db_index: int,
    mode: Literal["standalone", "cluster"],
    ssl: bool,
) -> Any:
    """Build a redis-py client the way Powertools' ``RedisConnection`` does.

    ``url`` wins over the other options; cluster mode has no database index.
    """
    import redis
    import redis.cluster

    factory: Any = redis.Redis if mode == "standalone" else redis.cluster.RedisCluster
    if url:
        return factory.from_url(url)
    options: dict[str, Any] = {} if mode == "cluster" else {"db": db_index}
    return factory(
        host=host,
        port=port,
        username=username or None,
        password=password or None,
        ssl=ssl,
        **options,
    )


@contextmanager
def translated_errors(operation: str) -> Iterator[None]:
    """Turn a client library's error raised inside into `IdempotencyPersistenceLayerError`."""
    try:
        yield
    except Exception as exc:
        if not isinstance(exc, _client_error_types()):
            raise
        code = str(exc).split(" ", 1)[0]  # Redis error codes: WRONGTYPE, NOAUTH, OOM...
        detail = f" {code}" if code.isupper() and code.isalpha() else ""
        raise IdempotencyPersistenceLayerError(
            f"Redis {operation} failed: {type(exc).__name__}{detail}"
        ) from exc


def _client_error_types() -> tuple[type[BaseException], ...]:
    """Return the base error classes of the client libraries already imported (no new import)."""
    found: list[type[BaseException]] = []
    for module_name, class_name in _ERROR_BASES:
        module = sys.modules.get(module_name)
        error = getattr(module, class_name, None)
        if isinstance(error, type) and issubclass(error, BaseException):
            found.append(error)
    return tuple(found)


def as_dict(reply: Any) -> dict[bytes, bytes]:
    """Return a hash reply as a dict, whether it came as a RESP3 map or a flat RESP2 list."""
    if isinstance(reply, Mapping):
        return dict(reply)
    items = list(reply or ())
    return dict(zip(items[::2], items[1::2], strict=True))
