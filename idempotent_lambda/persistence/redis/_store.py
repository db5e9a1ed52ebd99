"""The Redis (or Valkey) store: its connection settings, the store, and Powertools' names for them.

The package `idempotent_lambda.persistence.redis` re-exports them at Powertools' module path.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol
from urllib.parse import parse_qs, urlsplit

from idempotent_lambda._clock import SYSTEM_CLOCK, Clock
from idempotent_lambda.exceptions import (
    IdempotencyConfigError,
    IdempotencyCorruptRecordError,
    IdempotencyPersistenceConfigError,
)
from idempotent_lambda.persistence.protocol import DEFAULT_COMPRESSION_THRESHOLD_BYTES, ClaimOutcome
from idempotent_lambda.persistence.redis._commands import (
    GET_MANY,
    NEEDS_ORPHAN_LOCK,
    Arg,
    LazyRedisClient,
    translate_errors,
)
from idempotent_lambda.persistence.redis._schema import (
    HashSchema,
    JsonSchema,
    orphan_lock_key,
    orphan_lock_seconds,
)
from idempotent_lambda.record import IdempotencyRecord

Mode = Literal["standalone", "cluster"]

#: Redis keeps a key this long after its record expired, so that a store whose clock runs behind
#: Redis' still finds the record it considers live (expiry itself is decided in code).
DEFAULT_TTL_GRACE_SECONDS = 300


class RedisClientProtocol(Protocol):
    """A redis-py style client (`redis.Redis`, `redis.cluster.RedisCluster`, valkey-py)."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        """Send one command and return its reply."""
        ...


class GlideClientProtocol(Protocol):
    """A valkey-glide synchronous client (`glide_sync.GlideClient`/`GlideClusterClient`)."""

    def custom_command(self, command_args: list[Any]) -> Any:
        """Send one command given as its words and return its reply."""
        ...


class RedisConnection:
    """Connection options for a redis-py client, as Powertools' `RedisConnection` takes them.

    The options are those of `RedisCachePersistenceLayer`, in the same order.

    Raises:
        IdempotencyConfigError: `mode` is neither of the two.
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
        """Build the redis-py client (Powertools' method name); TLS checks the host name.

        A standalone client connects on its first command, a cluster client at once.

        Raises:
            IdempotencyPersistenceConfigError: TLS to a cluster with redis-py 5, whose cluster
                client drops the host name check.
        """
        import redis
        import redis.cluster

        cluster = self.mode == "cluster"
        tls = _url_tls_options(self.url) if self.url else _CHECK_HOST_NAME if self.ssl else {}
        if cluster and tls.get("ssl_check_hostname") and redis.VERSION[0] < 6:
            raise IdempotencyPersistenceConfigError(
                "redis-py 5 cannot check the host name of TLS cluster nodes: install redis>=6"
            )
        factory: Any = redis.cluster.RedisCluster if cluster else redis.Redis
        if self.url:
            return factory.from_url(self.url, **tls)
        options: dict[str, Any] = {} if cluster else {"db": self.db_index}
        return factory(
            host=self.host,
            port=self.port,
            username=self.username or None,
            password=self.password or None,
            ssl=self.ssl,
            **options,
            **tls,
        )


#: TLS verifies that the certificate names the host (redis-py before 6.0 does not by default).
_CHECK_HOST_NAME: Mapping[str, bool] = {"ssl_check_hostname": True}


def _url_tls_options(url: str) -> Mapping[str, bool]:
    """Return the TLS options a client from ``url`` gets beside the URL's own (which win).

    A ``rediss://`` URL checks the host name, unless it turns certificate checks off
    (``ssl_cert_reqs=none``): then there is no name to check, and Python refuses to.
    """
    parts = urlsplit(url)
    if parts.scheme != "rediss":
        return {}
    cert_reqs = parse_qs(parts.query).get("ssl_cert_reqs", [""])[0]
    return {"ssl_check_hostname": cert_reqs.lower() != "none"}


class RedisCachePersistenceLayer:
    """Keep idempotency records in Redis or Valkey: each operation is one Lua script or read.

    Give it a client (redis-py, valkey-py, valkey-glide; standalone or cluster) or the connection
    options, from which it builds a redis-py client on first use. Expiry is decided in code with
    `clock`; each write also sets a Redis TTL of the record's life plus `ttl_grace_seconds`.

    Args:
        url: Connection URL; overrides host, port and the rest.
        host: Server host name.
        port: Server port.
        username: ACL user name ("" for none).
        password: Password ("" for none).
        db_index: Database number (standalone only).
        mode: `"standalone"` or `"cluster"`.
        ssl: Connect with TLS (default True, as in Powertools).
        client: A ready client; when given, the connection options are ignored.
        in_progress_expiry_attr: Field of the lease end (epoch milliseconds).
        expiry_attr: Field of the expiration (epoch seconds).
        status_attr: Field of the status.
        data_attr: Field of the stored result.
        validation_key_attr: Field of the payload validation hash.
        owner_attr: Field of the owner token of the current claim.
        clock: Time source for the engine.
        compression_threshold_bytes: Results above this many UTF-8 bytes are stored compressed.
        ttl_grace_seconds: How long Redis keeps a key after its record expired.

    Raises:
        IdempotencyConfigError: Unknown `mode`, `ttl_grace_seconds` below 1, or a client this
            store cannot drive (one without arbitrary commands, or an asyncio client created on
            another event loop).
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
        connection = RedisConnection(url, host, port, username, password, db_index, mode, ssl)
        self._schema: HashSchema | JsonSchema = HashSchema(
            expiry_attr=expiry_attr,
            in_progress_expiry_attr=in_progress_expiry_attr,
            status_attr=status_attr,
            data_attr=data_attr,
            validation_key_attr=validation_key_attr,
            owner_attr=owner_attr,
        )
        self._threshold = compression_threshold_bytes
        self._grace_ms = ttl_grace_seconds * 1000
        self._client = LazyRedisClient(connection._init_client)
        if client is not None:
            self._client.set(client)

    @property
    def client(self) -> Any:
        """The Redis client; built from the connection options on first use unless given."""
        return self._client.get()

    @client.setter
    def client(self, client: RedisClientProtocol | GlideClientProtocol) -> None:
        self._client.set(client)

    def with_record_format(self, record_format: str) -> RedisCachePersistenceLayer:
        """Return this store on the same client, keeping records in `record_format`.

        `"powertools"` is Powertools' layout, `JsonSchema`.

        Raises:
            IdempotencyConfigError: An unknown format.
        """
        if record_format == "native":
            return self
        if record_format != "powertools":
            raise IdempotencyConfigError(f"unknown record_format {record_format!r}")
        view = copy.copy(self)  # shares the lazy client, so a client set later reaches both
        view._schema = JsonSchema(**dataclasses.asdict(self._schema))
        return view

    def claim(
        self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int
    ) -> ClaimOutcome:
        """See `PersistenceStore.claim`: one script, whose reply carries the record it replaced.

        In Powertools' layout, taking over an expired or abandoned record first takes Powertools'
        orphan lock `{key}:lock` (two more round trips); while another caller holds it, the claim
        fails and reports that caller's claim, live until the lock ends (read with `PTTL`), so a
        waiter waits for the lock's holder instead of claiming again at once.
        """
        schema, key = self._schema, record.idempotency_key
        window = [str(now_ms // 1000), str(lease_cutoff_ms), self._ttl_ms(record, now_ms)]
        names = [schema.expiry_attr, schema.status_attr, schema.in_progress_expiry_attr]
        head = [*window, *names, schema.in_progress]
        stored = schema.encode(record, self._threshold)
        may_take_over = "0" if schema.orphan_lock else "1"
        with translate_errors("claim"):
            claimed, old = self._eval(schema.claim_script, key, *head, may_take_over, *stored)
            if claimed == NEEDS_ORPHAN_LOCK:
                seconds = orphan_lock_seconds(record, now_ms)
                lock = ("SET", orphan_lock_key(key), "True", "EX", str(seconds), "NX")
                if self._client.send(*lock) is None:
                    # Its holder is claiming this request: live, for as long as the lock lives.
                    left_ms = _lock_left_ms(self._client.send("PTTL", lock[1]), seconds)
                    lock_end_ms = now_ms + left_ms
                    # Owned by the lock, so that no caller (a durable replay adopting a claim
                    # without an owner) takes it for its own.
                    holder = dataclasses.replace(
                        record, owner=lock[1], in_progress_expiry_timestamp=lock_end_ms
                    )
                    return ClaimOutcome(False, holder)
                claimed, old = self._eval(schema.claim_script, key, *head, "1", *stored)
        if not claimed:
            return ClaimOutcome(False, schema.decode(key, old))
        try:
            return ClaimOutcome(True, schema.decode(key, old))
        except IdempotencyCorruptRecordError:
            # Already replaced: failing now would leave our claim blocking the key for nothing.
            return ClaimOutcome(True, None)

    def complete(self, record: IdempotencyRecord) -> bool:
        """See `PersistenceStore.complete`: one script."""
        schema = self._schema
        ttl = self._ttl_ms(record, self.clock.now_ms())
        stored = schema.encode(record, self._threshold)
        fence = self._fence(record.owner)
        with translate_errors("complete"):
            done = self._eval(schema.complete_script, record.idempotency_key, *fence, ttl, *stored)
        return bool(done)

    def release(self, idempotency_key: str, owner: str) -> bool:
        """See `PersistenceStore.release`: one script."""
        with translate_errors("release"):
            done = self._eval(self._schema.release_script, idempotency_key, *self._fence(owner))
        return bool(done)

    def get(self, idempotency_key: str) -> IdempotencyRecord | None:
        """See `PersistenceStore.get`: one `HGETALL` (`GET` in Powertools' layout)."""
        with translate_errors("get"):
            reply = self._client.send(self._schema.read_command, idempotency_key)
        return self._schema.decode(idempotency_key, reply)

    def get_many(self, idempotency_keys: Sequence[str]) -> dict[str, IdempotencyRecord]:
        """See `BatchReadStore.get_many`: one script, in our layout only.

        Records that do not follow the format are left out, so the caller's per-key path meets
        them. On a cluster every key must hash to one slot (a hash tag in the key prefix,
        `{orders}`); otherwise Redis refuses the script with CROSSSLOT and the error is raised.
        """
        keys = list(dict.fromkeys(idempotency_keys))
        schema = self._schema
        if not keys or not isinstance(schema, HashSchema):
            return {}
        with translate_errors("get_many"):
            replies = self._client.send("EVAL", GET_MANY, str(len(keys)), *keys)
        found: dict[str, IdempotencyRecord] = {}
        for key, reply in zip(keys, replies, strict=True):
            try:
                record = schema.decode(key, reply)
            except IdempotencyCorruptRecordError:
                continue
            if record is not None:
                found[key] = record
        return found

    def _eval(self, script: str, key: str, *args: Arg) -> Any:
        return self._client.send("EVAL", script, "1", key, *args)

    def _fence(self, owner: str | None) -> list[Arg]:
        """Return the arguments that condition a write on the caller's claim."""
        schema = self._schema
        expected = "0" if owner is None else "1"
        return [schema.status_attr, schema.owner_attr, schema.in_progress, expected, owner or ""]

    def _ttl_ms(self, record: IdempotencyRecord, now_ms: int) -> str:
        """Return the key's TTL for `record` in milliseconds ("" to keep it forever)."""
        if record.expiry_timestamp is None:
            return ""
        # The record is live through its expiration second; never hand Redis a TTL <= 0.
        remaining = (record.expiry_timestamp + 1) * 1000 - now_ms
        return str(max(remaining, 0) + self._grace_ms)


def _lock_left_ms(pttl: Any, seconds: int) -> int:
    """Return how long the orphan lock lives on, from its `PTTL` reply.

    A lock without a TTL (never Powertools') counts as one we would take; one gone meanwhile, as
    ended (the next claim takes it).
    """
    left = int(pttl)
    if left == -1:
        return seconds * 1000
    return max(left, 0)


CachePersistenceLayer = RedisCachePersistenceLayer
"""Powertools' newer name for the same store."""
CacheClientProtocol = RedisClientProtocol
CacheConnection = RedisConnection
