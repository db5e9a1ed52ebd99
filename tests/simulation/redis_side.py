"""The Redis store as the world's third store (issue 41), on a real ``redis-server``.

`RedisCachePersistenceLayer` promises the DynamoDB store's claim, completion, release and replay
rules, so the batch and durable workloads run on it too, with the same invariants. Each
environment has its own store (its clock skewed) on one client, `RedisWire`, which the store
takes as its redis-py client: every command passes the world there, as DynamoDB's requests
pass `wire.Wire`. A command is sent, refused (``error``: the connection drops before it is
sent; ``throttle``: Redis answers BUSY), sent and its reply lost, held on the wire, or its
invocation dies before or after it.

A held command is already on the wire: Redis applies it when it arrives, even after its
sender's end, at most `LATE_MS` after the sender's deadline (TCP delivers segments already
sent; later than that, the connection is gone and the command is not applied).

Time: Redis expires keys on its own clock, which does not move with the world's. The clock
bridge reads each key's TTL right after a simulated store's command set it, takes it off the
key (``PERSIST``) and keeps the key's end in world time; when the world's clock passes it the
bridge deletes the key, as Redis would. Left out: Redis' own clock skew (its clock is the
world's), and a key Redis keeps a little past its end (it never serves one).
"""

from __future__ import annotations

import atexit
import contextlib
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from idempotent_lambda.persistence.redis import RedisCachePersistenceLayer
from idempotent_lambda.persistence.redis import _commands as scripts
from idempotent_lambda.record import IdempotencyRecord
from tests.simulation.history import Write

if TYPE_CHECKING:
    from idempotent_lambda.persistence.protocol import ClaimOutcome
    from tests.simulation.world import Invocation, World

#: How long after its sender's deadline a command already on the wire may still reach Redis.
LATE_MS = 5_000
#: The lifecycle scripts, by the step a fault names.
_SCRIPTS = {
    scripts.CLAIM: "claim",
    scripts.CLAIM_JSON: "claim",
    scripts.COMPLETE: "complete",
    scripts.COMPLETE_JSON: "complete",
    scripts.RELEASE: "release",
    scripts.RELEASE_JSON: "release",
    scripts.GET_MANY: "BatchGetItem",
}
_READS = {"HGETALL": "GetItem", "GET": "GetItem", "PTTL": "GetItem", "SET": "lock"}
_server: list[int] = []


def server_port() -> int:
    """Start this process's ``redis-server`` on 127.0.0.1 once; return its port."""
    if not _server:
        from tests.integration._redis_server import start_redis_server, stop

        folder = tempfile.mkdtemp(prefix="sim-redis-")
        process, port = start_redis_server(Path(folder))
        atexit.register(stop, process)
        _server.append(port)
    return _server[0]


class RedisWire:
    """The client every simulated Redis store sends through (redis-py's ``execute_command``)."""

    def __init__(self, world: World) -> None:
        import redis

        self.w = world
        self.raw = redis.Redis(host="127.0.0.1", port=server_port())
        self.raw.flushdb()
        self.ends: dict[bytes, int] = {}  # key -> its end in world time (the clock bridge)
        self.calling: tuple[str, str, str | None] | None = None  # the store call: op, key, owner
        self.observer = RedisCachePersistenceLayer(client=self.raw).with_record_format(
            world.setup.record_format
        )

    def close(self) -> None:
        self.raw.flushdb()
        self.raw.close()

    def expire_due(self) -> None:
        """Delete the keys whose end the world's clock has passed, as Redis would."""
        now = self.w.clock.now_ms()
        for key in [k for k, end in self.ends.items() if end <= now]:
            del self.ends[key]
            self.raw.delete(key)
            text = key.decode()
            if not text.endswith(":lock"):
                self.w.items[text] = None
            self.w.history.add(now, "-", "expire", f"Redis expires {self._label(text)}")

    def _label(self, key: str) -> str:
        return self.w.history.key_label(key) if not key.endswith(":lock") else key[-12:]

    def _item(self, key: str) -> dict[str, Any] | None:
        record = self.observer.get(key)
        return None if record is None else self.w.schema.to_item(record, record.response_data)

    def _bridge(self, words: Sequence[Any]) -> None:
        """Move the TTLs the command set onto the world's clock."""
        for key in _keys(words):
            left = self.raw.pttl(key)
            if left is not None and left >= 0:
                self.raw.persist(key)
                self.ends[key] = self.w.clock.now_ms() + int(left)
            elif left == -2:
                self.ends.pop(key, None)

    def execute_command(self, *words: Any, **options: Any) -> Any:
        """Decide the fate of one command of a simulated store."""
        import redis

        world = self.w
        inv = world.stack[-1] if world.stack else None
        calling = self.calling  # the steps a held command lets run change it meanwhile
        if inv is None:
            return self._apply(None, None, words, options)
        if inv.dead:
            world.die(inv, "dead invocation")
        inv.requests += 1
        name = str(words[0]).upper()
        op = _SCRIPTS.get(str(words[1]), "other") if name == "EVAL" else _READS.get(name, name)
        inv.counts[op] = inv.counts.get(op, 0) + 1
        fault = inv.faults.get(f"{op}#{inv.counts[op]}")
        key = str(words[3]) if name == "EVAL" and op != "BatchGetItem" else str(words[1])
        world.history.add(
            world.clock.now_ms(),
            inv.name,
            "send",
            f"#{inv.requests} {op} {self._label(key)}" + (f" [{fault}]" if fault else ""),
        )
        kind = fault.kind if fault is not None else None
        if kind == "crash":
            world.die(inv, f"crashed before command #{inv.requests}")
        if kind == "error":
            raise redis.exceptions.ConnectionError("the connection dropped (simulated)")
        if kind == "throttle":
            raise redis.exceptions.ResponseError("BUSY Redis is busy (simulated)")
        if kind == "hold":
            assert fault is not None
            held = (fault.ms, fault.past_deadline, fault.during)
            return self._hold(inv, calling, held, words, options)
        reply = self._apply(inv, calling, words, options)
        if kind == "crash_applied":
            world.die(inv, f"crashed after command #{inv.requests} was applied")
        if kind == "lost_reply":
            world.history.add(world.clock.now_ms(), inv.name, "lost", "the reply is lost")
            raise redis.exceptions.TimeoutError("the reply was lost (simulated)")
        return reply

    def _hold(
        self,
        inv: Invocation,
        calling: tuple[str, str, str | None] | None,
        held_for: tuple[int, bool, tuple[Any, ...]],
        words: Sequence[Any],
        options: dict[str, Any],
    ) -> Any:
        import redis

        ms, past_deadline, during = held_for
        world = self.w
        now = world.clock.now_ms()
        longest = inv.deadline_ms - now + LATE_MS
        held = max(0, min(ms + (inv.deadline_ms - now if past_deadline else 0), longest))
        world.history.add(now, inv.name, "hold", f"command held {held}ms")
        world.advance(held)
        world.run_steps(during)
        if world.clock.now_ms() - now > longest:
            world.history.add(world.clock.now_ms(), inv.name, "lost", "the connection is gone")
            if world.clock.now_ms() > inv.deadline_ms:
                world.die(inv, "ended by Lambda at its deadline while the command was out")
            raise redis.exceptions.ConnectionError("the connection is gone (simulated)")
        reply = self._apply(inv, calling, words, options)
        if world.clock.now_ms() > inv.deadline_ms:
            world.die(inv, "ended by Lambda at its deadline while the command was out")
        return reply

    def _apply(
        self,
        inv: Invocation | None,
        calling: tuple[str, str, str | None] | None,
        words: Sequence[Any],
        options: dict[str, Any],
    ) -> Any:
        """Send the command to Redis; record what a lifecycle script changed."""
        before = self._item(calling[1]) if calling else None
        reply = self.raw.execute_command(*words, **options)
        self._bridge(words)
        if calling is None or inv is None:
            return reply
        op, key, owner = calling
        after = self._item(key)
        self.w.items[key] = after
        if before != after:
            labels = self.w.history
            self.w.history.add(
                self.w.clock.now_ms(),
                inv.name,
                "applied",
                f"{op} {labels.key_label(key)} by {labels.owner_label(key, owner)}: "
                f"{self.w.wire.describe_item(before)} -> {self.w.wire.describe_item(after)}",
                write=Write(key, op, owner, before, after),
            )
        return reply


def _keys(words: Sequence[Any]) -> list[bytes]:
    """Return the keys a command names (scripts: their KEYS; SET: its key)."""
    name = str(words[0]).upper()
    if name == "EVAL":
        count = int(words[2])
        return [_bytes(w) for w in words[3 : 3 + count]]
    if name == "SET":
        return [_bytes(words[1])]
    return []


def _bytes(word: Any) -> bytes:
    return word if isinstance(word, bytes) else str(word).encode()


class RecordingRedisStore(RedisCachePersistenceLayer):
    """An environment's Redis store: it tells the wire which lifecycle step each command is."""

    def __init__(self, wire: RedisWire, clock: Any) -> None:
        super().__init__(client=wire, clock=clock)
        self._wire = wire

    def claim(
        self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int
    ) -> ClaimOutcome:
        with self._calling("claim", record.idempotency_key, record.owner):
            return super().claim(record, now_ms=now_ms, lease_cutoff_ms=lease_cutoff_ms)

    def complete(self, record: IdempotencyRecord) -> bool:
        with self._calling("complete", record.idempotency_key, record.owner):
            return super().complete(record)

    def release(self, idempotency_key: str, owner: str) -> bool:
        with self._calling("release", idempotency_key, owner):
            return super().release(idempotency_key, owner)

    @contextlib.contextmanager
    def _calling(self, op: str, key: str, owner: str | None) -> Iterator[None]:
        outer, self._wire.calling = self._wire.calling, (op, key, owner)
        try:
            yield
        finally:
            self._wire.calling = outer
