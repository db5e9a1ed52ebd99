"""A store on Redis or Valkey: one hash per idempotency key, every operation one Lua script.

Powertools' name and constructor (``RedisCachePersistenceLayer``, ``RedisConnection``,
``RedisClientProtocol``) at Powertools' module path, with this library's semantics. redis-py is
an optional dependency (``pip install 'idempotent-lambda[redis]'``), imported only when the store
builds its own client.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from idempotent_lambda._clock import SYSTEM_CLOCK, Clock
from idempotent_lambda.exceptions import (
    IdempotencyConfigError,
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
    IdempotencyPersistenceConfigError,
    IdempotencyPersistenceConnectionError,
    IdempotencyPersistenceConsistencyError,
)
from idempotent_lambda.persistence import _redis_scripts as scripts
from idempotent_lambda.persistence._powertools_layer import BasePersistenceLayer
from idempotent_lambda.persistence._redis_client import (
    Commands,
    as_dict,
    build_client,
    commands_for,
    translated_errors,
)
from idempotent_lambda.persistence._redis_hash import CorruptHashError, HashSchema
from idempotent_lambda.persistence._redis_json import (
    JsonSchema,
    held_by_orphan_lock,
    orphan_lock_key,
    orphan_lock_seconds,
    under_orphan_lock,
)
from idempotent_lambda.persistence.datarecord import STATUS_CONSTANTS, DataRecord
from idempotent_lambda.persistence.protocol import (
    DEFAULT_COMPRESSION_THRESHOLD_BYTES,
    ClaimOutcome,
    encode_stored_data,
)
from idempotent_lambda.record import IdempotencyRecord

Mode = Literal["standalone", "cluster"]

#: Redis keeps a key this long after its record expired, so that a store whose clock runs behind
#: Redis' still finds the record it considers live (expiry itself is decided in code).
DEFAULT_TTL_GRACE_SECONDS = 300


class RedisClientProtocol(Protocol):
    """A redis-py style client (``redis.Redis``, ``redis.cluster.RedisCluster``, valkey-py)."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        """Send one command and return its reply."""
        ...


class GlideClientProtocol(Protocol):
    """A valkey-glide synchronous client (``glide_sync.GlideClient``/``GlideClusterClient``)."""

    def custom_command(self, command_args: list[Any]) -> Any:
        """Send one command given as its words and return its reply."""
        ...


class RedisConnection:
    """Connection options for a redis-py client, as Powertools' ``RedisConnection`` takes them.

    Args:
        url: A ``redis://`` or ``rediss://`` URL; when given, the other options are ignored.
        host: Server host name.
        port: Server port.
        username: ACL user name ("" for none).
        password: Password ("" for none).
        db_index: Database number (standalone mode only).
        mode: ``"standalone"`` or ``"cluster"``.
        ssl: Connect with TLS (the default, as in Powertools).

    Raises:
        IdempotencyConfigError: ``mode`` is neither of the two.
    """

    def __init__(  # noqa: PLR0917 - positional order of Powertools' constructor
        self,
        url: str = "",
        host: str = "",
        port: int = 6379,
        username: str = "",
        password: str = "",
        db_index: int = 0,
        mode: Mode = "standalone",
        ssl: bool = True,
    ) -> None:
        if mode not in ("standalone", "cluster"):
            raise IdempotencyPersistenceConfigError(
                f"mode must be 'standalone' or 'cluster', not {mode!r}"
            )
        self.url, self.host, self.port, self.mode, self.ssl = url, host, port, mode, ssl
        self.username, self.password, self.db_index = username, password, db_index

    def _init_client(self) -> Any:
        """Build the redis-py client (Powertools' method name; it does not connect yet)."""
        return build_client(
            url=self.url,
            host=self.host,
            port=self.port,
            username=self.username,
            password=self.password,
            db_index=self.db_index,
            mode=self.mode,
            ssl=self.ssl,
        )


class RedisCachePersistenceLayer:
    """Keep idempotency records in Redis or Valkey, one hash per key.

    Each operation is one round trip: the claim is a Lua script that writes the IN_PROGRESS
    record when the key is free (no record, an expired one, or an IN_PROGRESS one whose lease
    ended) and otherwise returns the blocking record; completion and release are scripts fenced
    on ``status = IN_PROGRESS`` and the caller's owner token; reads are one ``HGETALL``. So a
    first call costs two round trips and a replay one, and two racing claims cannot both win.

    Expiry is decided in code with the store's clock, exactly as the other stores decide it. Each
    write also gives the key a Redis TTL (the record's remaining life plus
    ``ttl_grace_seconds``) so that Redis drops it afterwards. Results above
    ``compression_threshold_bytes`` are stored zlib-compressed, and a result too large for a
    DynamoDB item is refused here too, so a function behaves the same on either store.

    A function configured with ``record_format="powertools"`` uses the view
    `with_record_format` returns: Powertools' layout, one JSON string per key.

    Give it a client (redis-py, valkey-py, valkey-glide-sync, or the coroutine valkey-glide's
    asyncio ``GlideClient.create`` returns; standalone or cluster), or the connection options,
    from which it builds a redis-py client on first use. Client errors
    become `IdempotencyPersistenceLayerError` naming the operation.

    Args:
        url: Connection URL; overrides host, port and the rest.
        host: Server host name.
        port: Server port.
        username: ACL user name ("" for none).
        password: Password ("" for none).
        db_index: Database number (standalone only).
        mode: ``"standalone"`` or ``"cluster"``.
        ssl: Connect with TLS (default True, as in Powertools).
        client: A ready client; when given, the connection options are ignored.
        in_progress_expiry_attr: Field of the lease end (epoch milliseconds).
        expiry_attr: Field of the expiration (epoch seconds).
        status_attr: Field of the status.
        data_attr: Field of the stored result.
        validation_key_attr: Field of the payload validation hash.
        owner_attr: Field of the owner token of the current claim.
        clock: Time source for the engine.
        compression_threshold_bytes: Results above this many UTF-8 bytes are stored compressed
            (and any result over the item limit; see `persistence.base.encode_stored_data`).
        ttl_grace_seconds: How long Redis keeps a key after its record expired.

    Raises:
        IdempotencyConfigError: Unknown ``mode``, ``ttl_grace_seconds`` below 1, or a client
            this store cannot drive (one without arbitrary commands, or an asyncio client
            created on another event loop).
        IdempotencyPersistenceLayerError: An asyncio glide client could not connect.
    """

    def __init__(  # noqa: PLR0917 - positional order of Powertools' constructor
        self,
        url: str = "",
        host: str = "",
        port: int = 6379,
        username: str = "",
        password: str = "",
        db_index: int = 0,
        mode: Mode = "standalone",
        ssl: bool = True,
        client: RedisClientProtocol | GlideClientProtocol | None = None,
        in_progress_expiry_attr: str = "in_progress_expiration",
        expiry_attr: str = "expiration",
        status_attr: str = "status",
        data_attr: str = "data",
        validation_key_attr: str = "validation",
        *,
        owner_attr: str = "owner",
        clock: Clock = SYSTEM_CLOCK,
        compression_threshold_bytes: int = DEFAULT_COMPRESSION_THRESHOLD_BYTES,
        ttl_grace_seconds: int = DEFAULT_TTL_GRACE_SECONDS,
    ) -> None:
        if ttl_grace_seconds < 1:
            raise IdempotencyConfigError("ttl_grace_seconds must be at least 1")
        self.clock = clock
        self._connection = RedisConnection(url, host, port, username, password, db_index, mode, ssl)
        self._schema = HashSchema(
            expiry_attr=expiry_attr,
            in_progress_expiry_attr=in_progress_expiry_attr,
            status_attr=status_attr,
            data_attr=data_attr,
            validation_key_attr=validation_key_attr,
            owner_attr=owner_attr,
        )
        self._layout: HashSchema | JsonSchema = self._schema
        self._threshold = compression_threshold_bytes
        self._grace_ms = ttl_grace_seconds * 1000
        self._slot = _ClientSlot(self._connection)
        if client is not None:
            self.client = client

    @property
    def client(self) -> Any:
        """The Redis client; built from the connection options on first use unless given."""
        self._get_commands()
        return self._slot.client

    @client.setter
    def client(self, client: RedisClientProtocol | GlideClientProtocol) -> None:
        self._slot.set(client)

    def with_record_format(self, record_format: str) -> RedisCachePersistenceLayer:
        """Return this store reading and writing records in ``record_format`` (same client).

        ``"powertools"``: Powertools' layout, one JSON string per key (``SET``/``GET``), its
        status spelling ``INPROGRESS``, results as uncompressed JSON text, plus the ``owner``
        attribute, which Powertools ignores, so completion and release stay fenced. Claims,
        completions and releases are still one Lua script each (`_redis_json`), except that
        taking over an expired or abandoned record first takes Powertools' orphan lock, as
        Powertools does (`_redis_json.orphan_lock_key`): two more round trips.

        Raises:
            IdempotencyConfigError: An unknown format.
        """
        if record_format == "native":
            return self
        if record_format != "powertools":
            raise IdempotencyConfigError(f"unknown record_format {record_format!r}")
        view = copy.copy(self)  # shares the client slot, so a client set later reaches both
        view._layout = JsonSchema(**dataclasses.asdict(self._schema))  # the same names
        return view

    def claim(
        self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int
    ) -> ClaimOutcome:
        """Write ``record`` (IN_PROGRESS) unless a live record holds its key.

        One script; see `PersistenceStore.claim` for the rule. The blocking record comes back
        when the claim fails, the replaced one when it succeeds.
        """
        layout = self._layout
        script, args = layout.claim_call(
            record,
            self._encode(record),
            now_ms=now_ms,
            lease_cutoff_ms=lease_cutoff_ms,
            ttl=self._ttl_ms(record, now_ms),
        )
        key = record.idempotency_key
        with translated_errors("claim"):
            commands = self._get_commands()
            claimed, old = commands.eval(script, key, args)
            if claimed == scripts.NEEDS_ORPHAN_LOCK:
                # Powertools' layout: take its lock before taking the record over, as it does.
                seconds = orphan_lock_seconds(record, now_ms)
                if not commands.set_if_absent(orphan_lock_key(key), "True", seconds):
                    return ClaimOutcome(False, held_by_orphan_lock(record, now_ms + seconds * 1000))
                claimed, old = commands.eval(script, key, under_orphan_lock(args))
        if not claimed:
            return ClaimOutcome(False, layout.previous(key, old))
        try:
            return ClaimOutcome(True, layout.previous(key, old))
        except CorruptHashError:
            # Already replaced: failing now would leave our claim blocking the key for nothing.
            return ClaimOutcome(True, None)

    def complete(self, record: IdempotencyRecord) -> bool:
        """Replace the caller's IN_PROGRESS record with ``record`` (COMPLETED), if still owned.

        Returns:
            False when the record is no longer IN_PROGRESS under ``record.owner``.

        Raises:
            IdempotencyUnstorableResultError: The result is too large, even compressed.
        """
        ttl = self._ttl_ms(record, self.clock.now_ms())
        script, args = self._layout.complete_call(record, self._encode(record), ttl)
        with translated_errors("complete"):
            done = self._get_commands().eval(script, record.idempotency_key, args)
        return bool(done)

    def release(self, idempotency_key: str, owner: str) -> bool:
        """Delete the caller's IN_PROGRESS record, if still owned, so a retry runs again.

        Returns:
            False when the record is no longer IN_PROGRESS under ``owner``.
        """
        script, args = self._layout.release_call(owner)
        with translated_errors("release"):
            done = self._get_commands().eval(script, idempotency_key, args)
        return bool(done)

    def get(self, idempotency_key: str) -> IdempotencyRecord | None:
        """Read the record for ``idempotency_key``; None when absent."""
        with translated_errors("get"):
            return self._layout.read(self._get_commands(), idempotency_key)

    def get_many(self, idempotency_keys: Sequence[str]) -> dict[str, IdempotencyRecord]:
        """Read the records of ``idempotency_keys`` in one script (one round trip).

        Hashes that do not follow the record format are left out, so the caller's per-key path
        meets them. On a cluster every key must hash to one slot (give them a hash tag through
        the key prefix, ``{orders}``); otherwise Redis refuses the script with CROSSSLOT, the
        error is raised, and a batch falls back to claiming each record.
        """
        keys = list(dict.fromkeys(idempotency_keys))
        if not keys or self._layout is not self._schema:  # Powertools' layout: no batch read
            return {}
        with translated_errors("get_many"):
            replies = self._get_commands().eval_keys(scripts.GET_MANY, keys)
        found: dict[str, IdempotencyRecord] = {}
        for key, reply in zip(keys, replies, strict=True):
            fields = as_dict(reply)
            if not fields:
                continue
            try:
                found[key] = self._schema.from_fields(key, fields)
            except CorruptHashError:
                continue
        return found

    def _ttl_ms(self, record: IdempotencyRecord, now_ms: int) -> str:
        """Return the key's TTL for ``record`` in milliseconds ("" to keep it forever)."""
        if record.expiry_timestamp is None:
            return ""
        # The record is live through its expiration second; never hand Redis a TTL <= 0.
        remaining = (record.expiry_timestamp + 1) * 1000 - now_ms
        return str(max(remaining, 0) + self._grace_ms)

    def _encode(self, record: IdempotencyRecord) -> str | bytes | None:
        if record.response_data is None:
            return None
        if not self._layout.compresses:
            return record.response_data
        return encode_stored_data(record.response_data, compression_threshold=self._threshold)

    def _get_commands(self) -> Commands:
        return self._slot.commands()


class _ClientSlot:
    """The client a store and its format views share, built on first use under a lock."""

    def __init__(self, connection: RedisConnection) -> None:
        self._connection = connection
        self.client: Any = None
        self._commands: Commands | None = None
        self._lock = threading.Lock()

    def set(self, client: Any) -> None:
        commands = commands_for(client)
        with self._lock:
            self.client, self._commands = client, commands

    def commands(self) -> Commands:
        commands = self._commands
        if commands is None:
            with self._lock:
                if self._commands is None:
                    self.client = self._connection._init_client()
                    self._commands = commands_for(self.client)
                commands = self._commands
        return commands


CachePersistenceLayer = RedisCachePersistenceLayer
"""Powertools' newer name for the same store."""
CacheClientProtocol = RedisClientProtocol
CacheConnection = RedisConnection

# Powertools' module holds these names too, so a literal import swap finds them here.
__all__ = [
    "STATUS_CONSTANTS",
    "BasePersistenceLayer",
    "CacheClientProtocol",
    "CacheConnection",
    "CachePersistenceLayer",
    "DataRecord",
    "IdempotencyItemAlreadyExistsError",
    "IdempotencyItemNotFoundError",
    "IdempotencyPersistenceConfigError",
    "IdempotencyPersistenceConnectionError",
    "IdempotencyPersistenceConsistencyError",
    "RedisCachePersistenceLayer",
    "RedisClientProtocol",
    "RedisConnection",
]
