"""Run a `program.Program` against the real library on moto's server and record its history.

The world plays Lambda (environments with skewed clocks, invocations with deadlines, crashes,
the batch sources' redelivery: `sources.Source`) and, through `wire.Wire`, the network between
the library and DynamoDB; the outbox's path is `outbox_side.Outbox`. It is a deterministic
scheduler: one invocation runs at a time, and another runs only inside a request the network
holds (a `program.Fault` ``hold`` with steps ``during``), so a run depends on its program alone.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from idempotent_lambda import IdempotencyConfig
from idempotent_lambda._durable_context import DURABLE_LEASE_SECONDS
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.persistence.dynamodb._operator import create_idempotency_table
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from idempotent_lambda.transaction import running_transaction
from tests.simulation import network
from tests.simulation.durable_side import Durable
from tests.simulation.history import History
from tests.simulation.memory_side import RecordingMemoryStore
from tests.simulation.network import Crash
from tests.simulation.outbox_side import Outbox
from tests.simulation.program import (
    START_MS,
    Call,
    Consume,
    DCall,
    Fault,
    Poll,
    Program,
    Publish,
    Step,
    Sweep,
    Tick,
)
from tests.simulation.redis_side import RecordingRedisStore, RedisWire
from tests.simulation.sources import DECORATORS, Source
from tests.simulation.wire import Wire


class SkewedClock:
    """An environment's clock: the world's, off by a fixed skew within the tolerance."""

    def __init__(self, world: ManualClock, skew_ms: int) -> None:
        self._world = world
        self.skew_ms = skew_ms

    def now_ms(self) -> int:
        return self._world.now_ms() + self.skew_ms


@dataclass
class Invocation:
    """One Lambda invocation: its environment, deadline (world time) and fault plan."""

    name: str
    env: int
    deadline_ms: int
    faults: dict[int, Fault]
    requests: int = 0
    dead: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    plan: Step | None = None
    positions: dict[str, int] = field(default_factory=dict)


@dataclass
class Env:
    """One execution environment (warm between its invocations): its clock and handlers."""

    clock: SkewedClock
    store: DynamoDBPersistenceLayer | RecordingMemoryStore | RecordingRedisStore
    settings: str
    handlers: dict[str, Any] = field(default_factory=dict)


class World:
    """The simulated world of one run."""

    def __init__(self, program: Program, endpoint: str) -> None:
        self.program = program
        self.setup = program.setup
        self.endpoint = endpoint
        self.clock = ManualClock(START_MS)
        self.history = History(START_MS)
        self.observer = network.client("dynamodb", endpoint, "library", -1)
        self.table = f"sim-{uuid.uuid4().hex[:12]}"
        create_idempotency_table(self.observer, table_name=self.table, outbox=self.setup.sweeper)
        self.bucket = ""
        if self.setup.offload:
            self.bucket = self.table
            network.client("s3", endpoint, "library", -1).create_bucket(Bucket=self.bucket)
        self.outbox = Outbox(self)
        self.wire = Wire(self)
        self.durable = Durable(self)
        if self.setup.workload == "outbox":
            self.observer.update_table(
                TableName=self.table,
                StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
            )
            self.outbox.stream_arn = self.observer.describe_table(TableName=self.table)["Table"][
                "LatestStreamArn"
            ]
        self.items: dict[str, dict[str, Any] | None] = {}  # every write's result, as read
        schema_store = DynamoDBPersistenceLayer(self.table, boto3_client=self.observer)
        self.schema = schema_store.with_record_format(self.setup.record_format)._schema
        self.envs: dict[int, Env] = {}
        self.memory = RecordingMemoryStore(self) if self.setup.store == "memory" else None
        self.memory_handlers: dict[str, Any] = {}
        self.redis = RedisWire(self) if self.setup.store == "redis" else None
        self.stack: list[Invocation] = []
        self.counter = 0
        self.source = Source(
            self.setup.source, self.setup.keys, self.setup.lanes, self.setup.timeout_ms
        )
        self.history.meta["ordered"] = program.setup.workload == "batch" and self.source.ordered
        self.history.meta["lanes"] = {r.name: r.lane for r in self.source.records}

    # --- running ---

    def run(self) -> History:
        """Run the program, then drain (no faults): the checker needs every effect settled."""
        with network.active(self.wire.on_send), network.simulated(self.sleep, self.clock.now_ms):
            self.run_steps(self.program.steps)
            self.drain()
        self.observer.delete_table(TableName=self.table)
        if self.bucket:
            s3 = network.client("s3", self.endpoint, "library", -1)
            for item in s3.list_objects_v2(Bucket=self.bucket).get("Contents", []):
                s3.delete_object(Bucket=self.bucket, Key=item["Key"])
            s3.delete_bucket(Bucket=self.bucket)
        if self.redis is not None:
            self.redis.close()
        return self.history

    def advance(self, ms: int) -> None:
        self.clock.advance(ms=max(ms, 0))
        if self.redis is not None:
            self.redis.expire_due()

    def sleep(self, ms: int) -> None:
        """A sleep of the library: time passes, unless the sleeper is already dead."""
        if not (self.stack and self.stack[-1].dead):
            self.advance(ms)

    def run_steps(self, steps: tuple[Step, ...]) -> None:
        for step in steps:
            self.run_step(step)

    def run_step(self, step: Step) -> None:
        if isinstance(step, Tick):
            self.advance(step.ms)
            self.history.add(self.clock.now_ms(), "-", "tick", f"{step.ms}ms pass")
        elif isinstance(step, Poll):
            self.poll(step)
        elif isinstance(step, Call):
            self.outbox.call(step)
        elif isinstance(step, DCall):
            self.durable.call(step)
        elif isinstance(step, Publish):
            self.outbox.publish(step.env, step.faults)
        elif isinstance(step, Sweep):
            self.outbox.sweep(step.env, step.faults)
        elif isinstance(step, Consume):
            self.outbox.consume(step.env, step.faults)
        if self.setup.workload == "outbox":
            self.outbox.expire_items()
        self.outbox.read_stream()

    def drain(self) -> None:
        """Let the sources deliver what they still hold, fault-free, until nothing is left."""
        for _ in range(6):
            self.advance(self.setup.timeout_ms + 2_000)
            if self.setup.workload == "batch":
                self.poll(Poll(env=0))
            elif self.setup.workload == "durable":
                self.durable.drain()
            else:
                outbox = self.outbox
                outbox.read_stream()
                while outbox.pending_stream():
                    before = outbox.checkpoint
                    outbox.publish(0, ())
                    if outbox.checkpoint == before:
                        break
                if self.setup.sweeper:
                    outbox.sweep(0, ())
                outbox.consume(0, ())
        if self.bucket:
            self.audit_results()
        if self.setup.workload == "batch":
            undone = [r.name for r in self.source.records if not r.done]
            self.history.add(self.clock.now_ms(), "-", "drained", f"undone={undone}", undone=undone)

    def audit_results(self) -> None:
        """Read back every completed record's result, its S3 object resolved, as a replay
        would: the checker matches it with the run that completed the record."""
        from idempotent_lambda.exceptions import IdempotencyPersistenceLayerError

        reader = DynamoDBPersistenceLayer(
            self.table,
            boto3_client=self.observer,
            large_result_bucket=self.bucket,
            s3_client=network.client("s3", self.endpoint, "library", -1),
        )
        for key, item in sorted(self.items.items()):
            if item is None or item.get(self.schema.status_attr, {}).get("S") != "COMPLETED":
                continue
            try:
                record = reader.get(key)
                result = record.response_json_as_dict() if record else None
            except IdempotencyPersistenceLayerError as exc:
                result = {"error": str(exc)}
            owner = item.get(self.schema.owner_attr, {}).get("S")
            self.history.add(
                self.clock.now_ms(),
                "-",
                "audit",
                f"{self.history.key_label(key)} holds {result}",
                key=key,
                owner=owner,
                result=result,
            )

    def env(self, number: int) -> Env:
        if number not in self.envs:
            skew = self.setup.skews[number % len(self.setup.skews)]
            clock = SkewedClock(self.clock, skew)
            ddb = network.client("dynamodb", self.endpoint, self.setup.client, number)
            store: DynamoDBPersistenceLayer | RecordingMemoryStore | RecordingRedisStore
            if self.memory is not None:  # one store: it has a length, so test it with `is`
                store = self.memory
            elif self.redis is not None:
                store = RecordingRedisStore(self.redis, clock)
            elif self.bucket:
                s3 = network.client("s3", self.endpoint, self.setup.client, number)
                store = DynamoDBPersistenceLayer(
                    self.table,
                    boto3_client=ddb,
                    clock=clock,
                    large_result_bucket=self.bucket,
                    large_result_threshold_bytes=0,
                    s3_client=s3,
                )
            else:
                store = DynamoDBPersistenceLayer(self.table, boto3_client=ddb, clock=clock)
            self.envs[number] = Env(clock, store, self.setup.client)
            if self.memory is not None:  # one store, one handler (its key prefix is reserved)
                self.envs[number].handlers = self.memory_handlers
        return self.envs[number]

    def invoke(self, kind: str, env: int, faults: tuple[Fault, ...]) -> Invocation:
        """Start an invocation in environment ``env``, or in a fresh one while ``env`` still
        runs another (an environment runs one invocation at a time)."""
        now = self.clock.now_ms()
        busy = {i.env for i in self.stack if not i.dead and i.deadline_ms >= now}
        while env in busy:
            env += 3  # a cold environment, with the same skew
        self.counter += 1
        return Invocation(
            f"{kind}{self.counter}",
            env,
            self.clock.now_ms() + self.setup.timeout_ms,
            {fault.at: fault for fault in faults},
        )

    def config(self, **options: Any) -> IdempotencyConfig:
        def hook(decision: Any) -> None:
            if self.stack and self.stack[-1].dead:
                return  # decided in a process Lambda already ended
            inv = self.stack[-1].name if self.stack else "-"
            label = self.history.key_label(decision.key) if decision.key else "-"
            self.history.add(
                self.clock.now_ms(),
                inv,
                "decide",
                f"{label} {decision.outcome.value}",
                key=decision.key,
                outcome=decision.outcome.value,
            )

        return IdempotencyConfig(
            record_format=self.setup.record_format,  # type: ignore[arg-type]
            expires_after_seconds=self.setup.expires_s,
            decision_hook=hook,
            **options,
        )

    def enter(self, inv: Invocation, what: str) -> FakeLambdaContext:
        self.stack.append(inv)
        env = self.env(inv.env)
        self.history.add(
            self.clock.now_ms(),
            inv.name,
            "invoke",
            f"{what} env{inv.env} deadline=+{(inv.deadline_ms - self.clock.now_ms()) / 1000}s",
            deadline_ms=inv.deadline_ms,
        )
        return FakeLambdaContext(self.setup.timeout_ms, clock=env.clock)

    def leave(self, inv: Invocation) -> None:
        self.stack.remove(inv)

    def guarded(self, inv: Invocation, handler: Any, event: Any, context: Any) -> Any:
        """Call ``handler`` as Lambda would; None when the invocation died or raised."""
        try:
            answer = handler(event, context)
            return None if inv.dead else answer
        except BaseException as exc:
            if inv.dead:  # whatever the dying invocation raised on its way out reaches no one
                return None
            if not isinstance(exc, Exception):
                raise
            self.history.add(self.clock.now_ms(), inv.name, "error", type(exc).__name__)
            return None
        finally:
            self.leave(inv)

    # --- a body run ---

    def body_ran(
        self,
        inv: Invocation,
        hint: str,
        crash: bool,
        body_ms: int,
        lane: str | None = None,
        execution: str | None = None,
        group: str | None = None,
    ) -> None:
        """Record the run of a body (its key, owner and lease, read from the table); a durable
        execution's claim (``execution``) lasts as long as the execution may. Runs of one ``group``
        (a durable step's place in its execution) are checked as runs of one key."""
        if inv.dead:
            raise Crash("dead invocation")
        transaction = running_transaction()
        key = transaction.record_key if transaction is not None else None
        item = self.items.get(key) if key else None  # the claim's result, as recorded
        owner = item.get(self.schema.owner_attr, {}).get("S") if item else None
        lease = item.get(self.schema.in_progress_expiry_attr, {}).get("N") if item else None
        if key:
            self.history.name(key, hint)
        label = self.history.key_label(key) if key else hint
        self.history.add(
            self.clock.now_ms(),
            inv.name,
            "run",
            f"{label} body runs as {self.history.owner_label(key, owner) if key else '-'}",
            key=key,
            owner=owner,
            lease=int(lease) if lease else None,
            deadline_ms=inv.deadline_ms
            if execution is None
            else self.clock.now_ms() + DURABLE_LEASE_SECONDS * 1000,
            hint=hint,
            lane=lane,
            execution=execution,
            group=group,
        )
        if body_ms:
            self.advance(body_ms)
        if self.clock.now_ms() > inv.deadline_ms:
            self.die(inv, "timed out in the body")
        if crash:
            self.die(inv, "crashed in the body")

    def die(self, inv: Invocation, why: str) -> None:
        inv.dead = True
        self.history.add(self.clock.now_ms(), inv.name, "crash", why)
        raise Crash(why)

    # --- batch sources ---

    def batch_handler(self, env: Env) -> Any:
        if "batch" not in env.handlers:
            world = self
            decorator = DECORATORS[self.setup.source]

            @decorator(persistence_store=env.store, config=self.config())
            def handler(record: Any, context: Any) -> dict[str, Any]:
                inv = world.stack[-1]
                name, lane = Source.name_of(record)
                plan = inv.plan
                assert isinstance(plan, Poll)
                position = inv.positions[name]
                world.body_ran(inv, name, position == plan.crash_body, plan.body_ms, lane=lane)
                if position == plan.fail_body:
                    world.history.add(world.clock.now_ms(), inv.name, "fail", f"{name} raises")
                    raise RuntimeError("the body failed, as planned")
                return {"record": name, "inv": inv.name}

            env.handlers["batch"] = handler
        return env.handlers["batch"]

    def poll(self, step: Poll) -> None:
        taken = self.source.take(self.clock.now_ms(), step.batch)
        if not taken:
            return
        inv = self.invoke("inv", step.env, step.faults)
        inv.plan = step
        inv.positions = {r.name: n for n, r in enumerate(taken)}
        handler = self.batch_handler(self.env(step.env))
        names = ",".join(r.name for r in taken)
        context = self.enter(inv, f"{self.setup.source} {names}")
        answer = self.guarded(inv, handler, self.source.event(taken), context)
        if answer is None:
            self.source.settle(taken, None, self.clock.now_ms())
            return
        failed = self.source.failed_names(answer, taken)
        done = [r.name for r in taken if r.name not in failed]
        self.history.add(
            self.clock.now_ms(),
            inv.name,
            "answer",
            f"done={done} failed={sorted(failed)}",
            done=done,
        )
        self.source.settle(taken, failed, self.clock.now_ms())
