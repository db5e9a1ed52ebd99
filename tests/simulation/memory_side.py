"""The in-memory store as the world's second store (issue 41).

`InMemoryPersistenceLayer` promises the DynamoDB store's claim, completion, release and replay
rules, so the batch and durable workloads run on it too, with the same invariants. It has no
network: the only faults are Lambda's at a store call (the invocation dies before or after it
is applied) and a pause there (the process is descheduled while other invocations run, at most
until Lambda ends it at its deadline). `RecordingMemoryStore` records each write in the
history as the wire does for DynamoDB, its records rendered as the DynamoDB schema's items.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from idempotent_lambda.persistence.in_memory import InMemoryPersistenceLayer
from idempotent_lambda.record import IdempotencyRecord
from tests.simulation.history import Write

if TYPE_CHECKING:
    from tests.simulation.world import World

T = TypeVar("T")
#: The fault kinds a store call without a network can meet.
KINDS = ("crash", "crash_applied", "hold")


class CurrentClock:
    """The clock of the environment whose invocation runs now (one store, skewed readers)."""

    def __init__(self, world: World) -> None:
        self._w = world

    def now_ms(self) -> int:
        if self._w.stack:
            return self._w.env(self._w.stack[-1].env).clock.now_ms()
        return self._w.clock.now_ms()


class RecordingMemoryStore(InMemoryPersistenceLayer):
    """The in-memory store, one for every environment, recording what each write changed."""

    def __init__(self, world: World) -> None:
        super().__init__(clock=CurrentClock(world))
        self._w = world

    def claim(self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int) -> Any:
        return self._call(
            "claim",
            record.idempotency_key,
            record.owner,
            lambda: super(RecordingMemoryStore, self).claim(
                record, now_ms=now_ms, lease_cutoff_ms=lease_cutoff_ms
            ),
        )

    def complete(self, record: IdempotencyRecord) -> bool:
        return self._call(
            "complete",
            record.idempotency_key,
            record.owner,
            lambda: super(RecordingMemoryStore, self).complete(record),
        )

    def complete_with(self, record: IdempotencyRecord, writes: Sequence[Any]) -> bool:
        return self._call(
            "complete",
            record.idempotency_key,
            record.owner,
            lambda: super(RecordingMemoryStore, self).complete_with(record, writes),
        )

    def release(self, idempotency_key: str, owner: str) -> bool:
        return self._call(
            "release",
            idempotency_key,
            owner,
            lambda: super(RecordingMemoryStore, self).release(idempotency_key, owner),
        )

    def _item(self, key: str) -> dict[str, Any] | None:
        record = super().get(key)
        return None if record is None else self._w.schema.to_item(record, record.response_data)

    def _call(self, op: str, key: str, owner: str | None, call: Callable[[], T]) -> T:
        world = self._w
        inv = world.stack[-1] if world.stack else None
        if inv is None:
            return call()
        if inv.dead:
            world.die(inv, "dead invocation")
        inv.requests += 1
        inv.counts[op] = inv.counts.get(op, 0) + 1
        fault = inv.faults.get(f"{op}#{inv.counts[op]}")
        fault = fault if fault is not None and fault.kind in KINDS else None
        label = world.history.key_label(key)
        world.history.add(
            world.clock.now_ms(),
            inv.name,
            "send",
            f"#{inv.requests} {op} {label} as {world.history.owner_label(key, owner)}"
            + (f" [{fault}]" if fault else ""),
        )
        if fault is not None and fault.kind == "crash":
            world.die(inv, f"crashed before store call #{inv.requests}")
        if fault is not None and fault.kind == "hold":
            now = world.clock.now_ms()
            wanted = fault.ms + (inv.deadline_ms - now if fault.past_deadline else 0)
            world.history.add(now, inv.name, "hold", f"paused {wanted}ms at the store call")
            world.advance(wanted)
            world.run_steps(fault.during)
            if world.clock.now_ms() > inv.deadline_ms:
                world.die(inv, "ended by Lambda at its deadline while paused")
        before = self._item(key)
        answer = call()
        after = self._item(key)
        world.items[key] = after
        if before != after:
            write = Write(key, op, owner, before, after)
            world.history.add(
                world.clock.now_ms(),
                inv.name,
                "applied",
                f"{op} {label} by {world.history.owner_label(key, owner)}: "
                f"{world.wire.describe_item(before)} -> {world.wire.describe_item(after)}",
                write=write,
            )
        if fault is not None and fault.kind == "crash_applied":
            world.die(inv, f"crashed after store call #{inv.requests} was applied")
        return answer
