"""Model-based testing: both stores, side by side, against a twenty-line reference model.

A hypothesis `RuleBasedStateMachine` claims, completes and releases records under fresh and
stale owner tokens (so takeovers and zombie writes happen), and moves time in small steps, past
leases and past expirations. Each step is applied to an `InMemoryPersistenceLayer`, to a
`DynamoDBPersistenceLayer` on the moto server, and to `Model`; every answer and, after every
step, every record must agree. Any divergence is a bug in one of the three.

The fast suite runs a small budget; the ``slow`` run uses a large one (figures in
docs/reliability.md).
"""

from __future__ import annotations

import json
import math
import os
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from idempotent_lambda import (
    DynamoDBPersistenceLayer,
    IdempotencyRecord,
    InMemoryPersistenceLayer,
    Status,
)
from idempotent_lambda._claim import CLOCK_SKEW_TOLERANCE_MS
from idempotent_lambda.persistence.base import DEFAULT_COMPRESSION_THRESHOLD_BYTES
from idempotent_lambda.testing import ManualClock

KEYS = ("a", "b", "c")
DATA = (
    '"small"',
    '{"total":"12.50","ok":true}',
    json.dumps({"blob": "x" * (DEFAULT_COMPRESSION_THRESHOLD_BYTES + 100)}),  # stored compressed
    json.dumps("caf\u00e9 \U0001f600"),
)


@dataclass(frozen=True)
class Ref:
    """A record as the reference model keeps it."""

    status: Status
    expiry_s: int
    lease_ms: int | None
    owner: str
    data: str | None = None
    payload_hash: str | None = None


class Model:
    """The lifecycle rules, and nothing else."""

    def __init__(self) -> None:
        self.records: dict[str, Ref] = {}

    def claim(self, key: str, new: Ref, now_ms: int) -> tuple[bool, Ref | None]:
        old = self.records.get(key)
        free = (
            old is None
            or old.expiry_s < now_ms // 1000
            or (
                old.status is Status.IN_PROGRESS
                and old.lease_ms is not None
                and old.lease_ms < now_ms - CLOCK_SKEW_TOLERANCE_MS
            )
        )
        if free:
            self.records[key] = new
        return free, old

    def owned(self, key: str, owner: str) -> bool:
        old = self.records.get(key)
        return old is not None and old.status is Status.IN_PROGRESS and old.owner == owner

    def complete(self, key: str, new: Ref) -> bool:
        if not self.owned(key, new.owner):
            return False
        self.records[key] = new
        return True

    def release(self, key: str, owner: str) -> bool:
        if not self.owned(key, owner):
            return False
        del self.records[key]
        return True


def as_ref(record: IdempotencyRecord | None) -> Ref | None:
    if record is None:
        return None
    assert record.expiry_timestamp is not None
    assert record.owner is not None
    return Ref(
        record.status,
        record.expiry_timestamp,
        record.in_progress_expiry_timestamp,
        record.owner,
        record.response_data,
        record.payload_hash,
    )


STATS = {"examples": 0, "steps": 0}
#: Offsets that land on the boundaries: the lease tolerance (1 s) and whole expiry seconds.
AROUND_ONE_SECOND = st.sampled_from([0, 999, 1_000, 1_001]) | st.integers(0, 1_500)


def make_machine(client: Any, table: str) -> type[RuleBasedStateMachine]:
    """Build the state machine class over one DynamoDB table (each example uses new keys)."""

    class StoresAgree(RuleBasedStateMachine):
        owners = Bundle("owners")

        def __init__(self) -> None:
            super().__init__()
            self.clock = ManualClock()
            self.namespace = uuid.uuid4().hex[:8]
            self.memory = InMemoryPersistenceLayer(clock=self.clock)
            self.dynamodb = DynamoDBPersistenceLayer(table, boto3_client=client, clock=self.clock)
            self.model = Model()
            STATS["examples"] += 1

        def key(self, name: str) -> str:
            return f"model.{self.namespace}#{name}"

        @initialize(target=owners)
        def first_owner(self) -> str:
            return "owner-0"

        @rule(
            target=owners,
            name=st.sampled_from(KEYS),
            lease_s=st.integers(1, 30),
            expires_after_s=st.integers(1, 60),
            payload_hash=st.sampled_from([None, "hash-1", "hash-2"]),
            at=st.sampled_from(["now", "lease", "expiry"]),
            offset_ms=AROUND_ONE_SECOND,
        )
        def claim(
            self,
            name: str,
            lease_s: int,
            expires_after_s: int,
            payload_hash: str | None,
            at: str,
            offset_ms: int,
        ) -> str:
            """Claim now, or first jump to around the current record's lease end or expiry."""
            STATS["steps"] += 1
            if at == "lease":
                self.lease_passes(name, offset_ms)
            elif at == "expiry":
                self.expiry_passes(name, offset_ms)
            now = self.clock.now_ms()
            owner = f"owner-{uuid.uuid4().hex[:6]}"
            lease_ms = now + lease_s * 1000
            expiry_s = max(now // 1000 + expires_after_s, math.ceil(lease_ms / 1000))
            ref = Ref(Status.IN_PROGRESS, expiry_s, lease_ms, owner, None, payload_hash)
            record = IdempotencyRecord(
                idempotency_key=self.key(name),
                status=Status.IN_PROGRESS,
                expiry_timestamp=expiry_s,
                in_progress_expiry_timestamp=lease_ms,
                payload_hash=payload_hash,
                owner=owner,
            )
            cutoff = now - CLOCK_SKEW_TOLERANCE_MS
            expected = self.model.claim(name, ref, now)
            for store in (self.memory, self.dynamodb):
                outcome = store.claim(record, now_ms=now, lease_cutoff_ms=cutoff)
                assert expected == (outcome.claimed, as_ref(outcome.previous)), type(store)
            return owner

        @rule(
            name=st.sampled_from(KEYS),
            owner=owners,
            data=st.sampled_from(DATA),
            expires_after_s=st.integers(1, 60),
        )
        def complete(self, name: str, owner: str, data: str, expires_after_s: int) -> None:
            STATS["steps"] += 1
            now = self.clock.now_ms()
            current = self.model.records.get(name)
            payload_hash = current.payload_hash if current is not None else None
            ref = Ref(
                Status.COMPLETED, now // 1000 + expires_after_s, None, owner, data, payload_hash
            )
            record = IdempotencyRecord(
                idempotency_key=self.key(name),
                status=Status.COMPLETED,
                expiry_timestamp=ref.expiry_s,
                response_data=data,
                payload_hash=payload_hash,
                owner=owner,
            )
            expected = self.model.complete(name, ref)
            for store in (self.memory, self.dynamodb):
                assert expected == store.complete(record), type(store)

        @rule(name=st.sampled_from(KEYS), owner=owners)
        def release(self, name: str, owner: str) -> None:
            STATS["steps"] += 1
            expected = self.model.release(name, owner)
            for store in (self.memory, self.dynamodb):
                assert expected == store.release(self.key(name), owner), type(store)

        @rule(ms=st.integers(1, 2_500))
        def time_passes(self, ms: int) -> None:
            STATS["steps"] += 1
            self.clock.advance(ms=ms)

        @rule(name=st.sampled_from(KEYS), extra_ms=AROUND_ONE_SECOND)
        def lease_passes(self, name: str, extra_ms: int) -> None:
            """Jump to around the end of the lease plus the tolerance: either side of it."""
            ref = self.model.records.get(name)
            if ref is not None and ref.lease_ms is not None:
                target = ref.lease_ms + extra_ms
                self.clock.set(max(self.clock.now_ms(), target))

        @rule(name=st.sampled_from(KEYS), extra_ms=AROUND_ONE_SECOND)
        def expiry_passes(self, name: str, extra_ms: int) -> None:
            """Jump to around the end of the record's expiration second."""
            ref = self.model.records.get(name)
            if ref is not None:
                target = ref.expiry_s * 1000 + extra_ms
                self.clock.set(max(self.clock.now_ms(), target))

        @invariant()
        def stores_hold_what_the_model_holds(self) -> None:
            for name in KEYS:
                expected = self.model.records.get(name)
                assert expected == as_ref(self.memory.get(self.key(name))), "in-memory"
                assert expected == as_ref(self.dynamodb.get(self.key(name))), "dynamodb"

    return StoresAgree


def run_model(client: Any, table: str, *, examples: int, steps: int) -> dict[str, int]:
    STATS.update(examples=0, steps=0)
    machine = make_machine(client, table)
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            database=None,
        ),
    )
    return dict(STATS)


def test_stores_agree_with_the_model(dynamodb_client: Any, idempotency_table: str) -> None:
    """A small budget in the fast suite: the stores and the model never diverge."""
    figures = run_model(dynamodb_client, idempotency_table, examples=12, steps=30)
    assert figures["examples"] >= 12


@pytest.mark.slow
def test_stores_agree_with_the_model_large_budget(
    dynamodb_client: Any, idempotency_table: str
) -> None:
    """The large budget (recorded in docs/reliability.md)."""
    examples = int(os.environ.get("RELIABILITY_MODEL_EXAMPLES", "400"))
    figures = run_model(dynamodb_client, idempotency_table, examples=examples, steps=60)
    print(f"RELIABILITY-FIGURES {json.dumps({'run': 'model', **figures})}")
    assert figures["examples"] >= examples
