"""What the Redis store sends: its Lua scripts, and the one way a command reaches a client.

Redis runs a script without interleaving other commands, so each check-then-write is as atomic
as a DynamoDB conditional write. Names and the IN_PROGRESS spelling arrive as arguments, never
spliced into the source, so every store shares its layout's scripts (and Redis' compiled-script
cache). Numbers compare as Lua doubles: exact for epoch milliseconds (below 2**53).

Both layouts' scripts take the same ``ARGV``:

- claim: now (epoch s), lease cutoff (epoch ms), TTL (ms, or "" for none), the expiry, status
  and lease names, the IN_PROGRESS spelling, "1" when the caller may take over an expired or
  abandoned record, then the new record (hash: field/value pairs; JSON: its text);
- complete: the status and owner names, the IN_PROGRESS spelling, "1" when an owner is expected
  (else the record must have none), the owner, the TTL, then the COMPLETED record;
- release: complete's first five.

Clients: redis-py and valkey-py (`execute_command`), valkey-glide's synchronous clients
(`custom_command`), and the coroutine valkey-glide's asyncio `GlideClient.create` returns.
Replies are read as raw bytes whatever `decode_responses` says: compressed results are binary.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from types import CoroutineType
from typing import Any

from idempotent_lambda.exceptions import IdempotencyConfigError, IdempotencyPersistenceLayerError

Arg = str | bytes
"""One word of a Redis command."""

#: A claim's first reply element when the record may be taken over only under Powertools'
#: orphan lock (the caller passed "0" as the eighth argument).
NEEDS_ORPHAN_LOCK = 2

# The rule of `claim_allowed` over `r`, the old record's attributes by name.
_CLAIM_RULE = f"""
  local expiry = tonumber(r[ARGV[4]])
  local lease = tonumber(r[ARGV[6]])
  local expired = expiry ~= nil and expiry < tonumber(ARGV[1])
  local abandoned = r[ARGV[5]] == ARGV[7] and lease ~= nil and lease < tonumber(ARGV[2])
  if not (expired or abandoned) then return {{0, old}} end
  if ARGV[8] ~= '1' then return {{{NEEDS_ORPHAN_LOCK}, old}} end
"""

# --- Our layout: one hash per key.

# Replace the hash with ARGV[first..] (field, value pairs), with a TTL of `ttl` ms ('' for none).
_REPLACE = """
local function replace(first, ttl)
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], unpack(ARGV, first))
  if ttl ~= '' then redis.call('PEXPIRE', KEYS[1], ttl) end
end
"""

_OWNED = """
local state = redis.call('HMGET', KEYS[1], ARGV[1], ARGV[2])
local owned
if ARGV[4] == '1' then owned = state[2] == ARGV[5] else owned = not state[2] end
if state[1] ~= ARGV[3] or not owned then return 0 end
"""

CLAIM = f"""{_REPLACE}
local old = redis.call('HGETALL', KEYS[1])
if #old > 0 then
  local r = {{}}
  for i = 1, #old, 2 do r[old[i]] = old[i + 1] end
{_CLAIM_RULE}
end
replace(9, ARGV[3])
return {{1, old}}
"""

COMPLETE = f"""{_REPLACE}{_OWNED}
replace(7, ARGV[6])
return 1
"""

RELEASE = f"""{_OWNED}
redis.call('DEL', KEYS[1])
return 1
"""

#: Every hash in KEYS, read in one script: a list of HGETALL replies in KEYS order.
GET_MANY = """
local replies = {}
for i, key in ipairs(KEYS) do
  replies[i] = redis.call('HGETALL', key)
end
return replies
"""

# --- Powertools' layout: one JSON string per key. cjson decodes the record only to read it; the
# new value arrives ready-made, so numbers are never re-encoded.

# Store `value` at the key with a TTL of `ttl` ms ('' for none).
_STORE = """
local function store(value, ttl)
  if ttl == '' then redis.call('SET', KEYS[1], value)
  else redis.call('SET', KEYS[1], value, 'PX', ttl) end
end
"""

_OWNED_JSON = """
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local ok, r = pcall(cjson.decode, raw)
if not ok or type(r) ~= 'table' or r[ARGV[1]] ~= ARGV[3] then return 0 end
local owner = r[ARGV[2]]
if owner == cjson.null then owner = nil end
if ARGV[4] == '1' then
  if owner ~= ARGV[5] then return 0 end
elseif owner ~= nil then return 0 end
"""

# A value that is not a JSON object blocks the claim (the caller reports it as corrupt).
CLAIM_JSON = f"""{_STORE}
local old = redis.call('GET', KEYS[1])
if old then
  local ok, r = pcall(cjson.decode, old)
  if not ok or type(r) ~= 'table' then return {{0, old}} end
{_CLAIM_RULE}
end
store(ARGV[9], ARGV[3])
return {{1, old}}
"""

COMPLETE_JSON = f"""{_STORE}{_OWNED_JSON}
store(ARGV[7], ARGV[6])
return 1
"""

RELEASE_JSON = f"""{_OWNED_JSON}
redis.call('DEL', KEYS[1])
return 1
"""

# --- The client: one way to send a command, whichever library the client comes from.

_ERROR_BASES = (
    ("redis.exceptions", "RedisError"),
    ("valkey.exceptions", "ValkeyError"),
    ("glide_shared.exceptions", "GlideError"),
)


class LazyRedisClient:
    """Redis' `LazyClient`: the client built on first use, once, thread-safely; commands go here.

    A store and its format views share one.
    """

    def __init__(self, build: Callable[[], Any]) -> None:
        self._build = build
        self._client: Any = None
        self._send: Callable[..., Any] | None = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        """Return the client, building it on the first call."""
        self._sender()
        return self._client

    def set(self, client: Any) -> None:
        """Send every later command to `client`.

        Raises:
            IdempotencyConfigError: The store cannot drive `client`.
        """
        send = _sender_for(client)
        with self._lock:
            self._client, self._send = client, send

    def send(self, *words: Arg) -> Any:
        """Send one command and return its reply, read as raw bytes."""
        return self._sender()(*words)

    def _sender(self) -> Callable[..., Any]:
        send = self._send
        if send is None:
            with self._lock:
                if self._send is None:
                    self._client = self._build()
                    self._send = _sender_for(self._client)
                send = self._send
        return send


def _sender_for(client: Any) -> Callable[..., Any]:
    """Return how to send a command to `client`, its reply read as raw bytes (results may be).

    Raises:
        IdempotencyConfigError: An asyncio client created on another event loop, or one that
            cannot send arbitrary commands (with only get/set/delete a claim cannot be atomic).
    """
    if inspect.iscoroutine(client):
        return _on_own_loop(client)
    custom = getattr(client, "custom_command", None)
    execute = getattr(client, "execute_command", None)
    if inspect.iscoroutinefunction(custom) or inspect.iscoroutinefunction(execute):
        raise IdempotencyConfigError(
            "an asyncio client belongs to the event loop it was created on; pass a synchronous"
            " client (or the coroutine valkey-glide's GlideClient.create(...) returns)"
        )
    if custom is not None:  # valkey-glide's synchronous clients, which always return bytes
        return lambda *words: custom(list(words))
    if execute is not None:  # redis-py and valkey-py; NEVER_DECODE is their raw-reply option
        return lambda *words: execute(*words, NEVER_DECODE=[])
    raise IdempotencyConfigError(
        f"a {type(client).__name__} cannot run Lua scripts; pass a redis-py, valkey-py or"
        " valkey-glide-sync client"
    )


def _on_own_loop(creating: CoroutineType[Any, Any, Any]) -> Callable[..., Any]:
    """Create valkey-glide's asyncio client on a private event loop; return its sender.

    Handlers are synchronous and an asyncio client belongs to its loop: the loop runs in a
    daemon thread and each command waits there for its reply (bounded by `request_timeout`).
    """
    if not creating.__qualname__.endswith("Client.create"):
        creating.close()  # never awaited: close it so Python does not warn about it
        raise IdempotencyConfigError(f"a coroutine ({creating.__qualname__}) is not a client")
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="idempotent-lambda-glide", daemon=True).start()

    def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result()

    try:
        with translate_errors("connect"):
            glide = run(creating)
    except BaseException:
        loop.call_soon_threadsafe(loop.stop)
        raise
    return lambda *words: run(glide.custom_command(list(words)))


@contextmanager
def translate_errors(operation: str) -> Iterator[None]:
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
        error = getattr(sys.modules.get(module_name), class_name, None)
        if isinstance(error, type) and issubclass(error, BaseException):
            found.append(error)
    return tuple(found)
