"""Run a `program.Program` against the real library on moto's server and record its history.

The world plays Lambda (environments with skewed clocks, invocations with deadlines, crashes,
SQS redelivery after the visibility timeout, the table stream's poller with its checkpoint and
the publisher's documented filter, EventBridge delivering to a consumer) and the network between
the library and DynamoDB (`on_send`). It is a deterministic scheduler: one invocation runs at a
time, and another runs only inside a request the network holds (a `program.Fault` ``hold`` with
steps ``during``), so a run depends on its program alone.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ReadTimeoutError
from botocore.httpsession import URLLib3Session

from idempotent_lambda import IdempotencyConfig, idempotent
from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.event_keys import OUTBOX_EVENT
from idempotent_lambda.metrics import EMFMetrics
from idempotent_lambda.outbox import STREAM_FILTER_PATTERN, emit, publish_handler
from idempotent_lambda.outbox._event import is_outbox_key
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.persistence.dynamodb._operator import create_idempotency_table
from idempotent_lambda.testing import FakeLambdaContext, ManualClock, api_gateway_http_event
from idempotent_lambda.transaction import running_transaction
from tests.simulation import network
from tests.simulation.history import History, Write
from tests.simulation.program import (
    START_MS,
    Call,
    Consume,
    Fault,
    Poll,
    Program,
    Publish,
    Step,
    Tick,
)
from tests.simulation.sources import DECORATORS, Source

SOURCE = "sim.orders"
ACCOUNT = "123456789012"
#: How long a table stream keeps a record.
STREAM_RETENTION_MS = 24 * 3600 * 1000


#: The lifecycle steps a fault may name instead of an operation (``complete#1``).
LIFECYCLE = ("claim", "complete", "release")


class Crash(Exception):  # noqa: N818 - what happened, not an error of the code
    """The invocation died (a crash, or Lambda ending it at its deadline): nothing more of it
    reaches the network, and no body of it runs.

    An `Exception`, not a `BaseException`: what the library does with it afterwards happens
    in a process Lambda has already ended, so only its requests matter, and `on_send` refuses
    them all. (A `BaseException` would leave the library's generators suspended.)
    """


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
    store: DynamoDBPersistenceLayer
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
        create_idempotency_table(self.observer, table_name=self.table)
        self.stream_arn = ""
        if self.setup.workload == "outbox":
            self.observer.update_table(
                TableName=self.table,
                StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
            )
            self.stream_arn = self.observer.describe_table(TableName=self.table)["Table"][
                "LatestStreamArn"
            ]
        self.items: dict[str, dict[str, Any] | None] = {}  # every write's result, as read
        schema_store = DynamoDBPersistenceLayer(self.table, boto3_client=self.observer)
        self.schema = schema_store.with_record_format(self.setup.record_format)._schema
        self._http = URLLib3Session()
        self.envs: dict[int, Env] = {}
        self.stack: list[Invocation] = []
        self.counter = 0
        self.source = Source(
            self.setup.source, self.setup.keys, self.setup.lanes, self.setup.timeout_ms
        )
        self.history.meta["ordered"] = program.setup.workload == "batch" and self.source.ordered
        self.history.meta["lanes"] = {r.name: r.lane for r in self.source.records}
        self.stream: list[dict[str, Any]] = []  # records in order, with "seen_ms"
        self.stream_seen: set[str] = set()
        self.checkpoint = 0
        self.bus: list[dict[str, Any]] = []  # entries EventBridge accepted, with "delivered"

    # --- running ---

    def run(self) -> History:
        """Run the program, then drain (no faults): the checker needs every effect settled."""
        with network.active(self.on_send), network.simulated(self.sleep, self.clock.now_ms):
            self.run_steps(self.program.steps)
            self.drain()
        self.observer.delete_table(TableName=self.table)
        return self.history

    def advance(self, ms: int) -> None:
        self.clock.advance(ms=max(ms, 0))

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
            self.call(step)
        elif isinstance(step, Publish):
            self.publish(step.env, step.faults)
        elif isinstance(step, Consume):
            self.consume(step.env, step.faults)
        self.read_stream()

    def drain(self) -> None:
        """Let the sources deliver what they still hold, fault-free, until nothing is left."""
        for _ in range(6):
            self.advance(self.setup.timeout_ms + 2_000)
            if self.setup.workload == "batch":
                self.poll(Poll(env=0))
            else:
                self.read_stream()
                while self.pending_stream():
                    before = self.checkpoint
                    self.publish(0, ())
                    if self.checkpoint == before:
                        break
                self.consume(0, ())
        if self.setup.workload == "batch":
            undone = [r.name for r in self.source.records if not r.done]
            self.history.add(self.clock.now_ms(), "-", "drained", f"undone={undone}", undone=undone)

    def env(self, number: int) -> Env:
        if number not in self.envs:
            skew = self.setup.skews[number % len(self.setup.skews)]
            clock = SkewedClock(self.clock, skew)
            ddb = network.client("dynamodb", self.endpoint, self.setup.client, number)
            store = DynamoDBPersistenceLayer(self.table, boto3_client=ddb, clock=clock)
            self.envs[number] = Env(clock, store, self.setup.client)
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
        self, inv: Invocation, hint: str, crash: bool, body_ms: int, lane: str | None = None
    ) -> None:
        """Record the run of a body (its key, owner and lease, read from the table)."""
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
            deadline_ms=inv.deadline_ms,
            hint=hint,
            lane=lane,
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

    # --- the outbox: a decorated handler, the publisher, a consumer ---

    def outbox_handler(self, env: Env) -> Any:
        if "call" in env.handlers:
            return env.handlers["call"]
        world = self

        def body(event: dict[str, Any]) -> dict[str, Any]:
            inv = world.stack[-1]
            plan = inv.plan
            assert isinstance(plan, Call)
            world.body_ran(inv, plan.key, plan.crash_body, plan.body_ms)
            emit("Simulated", {"k": plan.key, "inv": inv.name}, source=SOURCE)
            if plan.fail_body:
                world.history.add(world.clock.now_ms(), inv.name, "fail", "the body raises")
                raise RuntimeError("the body failed, as planned")
            return {"k": plan.key, "inv": inv.name}

        entry = self.setup.entry
        if entry == "http":

            @idempotent_http(
                persistence_store=env.store, config=self.config(), caller_scope="shared"
            )
            def on_http(event: dict[str, Any], context: Any) -> dict[str, Any]:
                return {"statusCode": 200, "body": json.dumps(body(event))}

            def handler(event: dict[str, Any], context: Any) -> Any:
                response = on_http(api_gateway_http_event(idempotency_key=event["k"]), context)
                if response["statusCode"] != 200:
                    raise RuntimeError(f"HTTP {response['statusCode']}")
                return json.loads(response["body"])

        elif entry == "async":

            @idempotent(persistence_store=env.store, config=self.config(event_key_jmespath="k"))
            async def on_async(event: dict[str, Any], context: Any) -> dict[str, Any]:
                return body(event)

            def handler(event: dict[str, Any], context: Any) -> Any:
                return asyncio.run(on_async(event, context))

        else:

            @idempotent(persistence_store=env.store, config=self.config(event_key_jmespath="k"))
            def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
                return body(event)

        env.handlers["call"] = handler
        return handler

    def call(self, step: Call) -> None:
        inv = self.invoke("inv", step.env, step.faults)
        inv.plan = step
        handler = self.outbox_handler(self.env(step.env))
        context = self.enter(inv, f"call {step.key}")
        answer = self.guarded(inv, handler, {"k": step.key}, context)
        if answer is not None:
            self.history.add(
                self.clock.now_ms(), inv.name, "answer", json.dumps(answer), key=step.key, **answer
            )

    def read_stream(self) -> None:
        """Fetch the stream's new records, stamped with the world's time.

        Read from the shard's start every time and keep the sequence numbers not seen yet:
        moto's iterators, read again after more writes, skip or repeat records.
        """
        if not self.stream_arn:
            return
        streams = network.client("dynamodbstreams", self.endpoint, "library", -1)
        shards = streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]["Shards"]
        for shard in shards:
            iterator = streams.get_shard_iterator(
                StreamArn=self.stream_arn,
                ShardId=shard["ShardId"],
                ShardIteratorType="TRIM_HORIZON",
            )["ShardIterator"]
            while iterator:
                response = streams.get_records(ShardIterator=iterator)
                for record in response["Records"]:
                    sequence = record["dynamodb"]["SequenceNumber"]
                    if sequence in self.stream_seen:
                        continue
                    self.stream_seen.add(sequence)
                    self.stream.append(_lambda_shape(record, self.stream_arn))
                    self.stream[-1]["seen_ms"] = self.clock.now_ms()
                if not response["Records"]:
                    break
                iterator = response.get("NextShardIterator")

    def pending_stream(self) -> list[dict[str, Any]]:
        now = self.clock.now_ms()
        while (
            self.checkpoint < len(self.stream)
            and now - self.stream[self.checkpoint]["seen_ms"] > STREAM_RETENTION_MS
        ):
            self.history.add(now, "-", "trim", "a stream record passed its retention")
            self.checkpoint += 1
        return self.stream[self.checkpoint :]

    def publish(self, env_number: int, faults: tuple[Fault, ...]) -> None:
        """The stream's event source mapping: filter, batch, invoke, move the checkpoint."""
        pending = self.pending_stream()
        batch: list[tuple[int, dict[str, Any]]] = []
        for offset, record in enumerate(pending):
            if not _passes_filter(record):
                if not batch:
                    self.checkpoint += 1  # filtered out: the mapping moves past it
                    if "outbox_id" in record["dynamodb"].get("NewImage", {}):
                        self.history.add(
                            self.clock.now_ms(),
                            "-",
                            "filtered",
                            f"the stream's {record['eventName']} of an outbox item: not an "
                            "INSERT, the publisher's filter drops it",
                        )
                continue
            batch.append((self.checkpoint + offset, record))
            if len(batch) == 10:
                break
        if not batch:
            return
        env = self.env(env_number)
        if "publish" not in env.handlers:
            events = network.client("events", self.endpoint, "library", env_number)
            metrics = EMFMetrics("sim", stream=io.StringIO())  # not checked: kept off stdout
            env.handlers["publish"] = publish_handler(
                env.store, events_client=events, metrics=metrics
            )
        inv = self.invoke("pub", env_number, faults)
        context = self.enter(inv, f"publish {len(batch)} record(s)")
        records = [{k: v for k, v in r.items() if k != "seen_ms"} for _, r in batch]
        answer = self.guarded(inv, env.handlers["publish"], {"Records": records}, context)
        if answer is None:
            return
        failed = {item["itemIdentifier"] for item in answer["batchItemFailures"]}
        for position, record in batch:
            if record["dynamodb"]["SequenceNumber"] in failed:
                break
            self.checkpoint = position + 1
        self.history.add(
            self.clock.now_ms(), inv.name, "answer", f"{len(failed)} record(s) to retry"
        )

    def consume(self, env_number: int, faults: tuple[Fault, ...]) -> None:
        """EventBridge delivers each event not yet consumed to the consumer."""
        env = self.env(env_number)
        if "consume" not in env.handlers:
            world = self

            @idempotent(
                persistence_store=env.store, config=self.config(event_key_jmespath=OUTBOX_EVENT)
            )
            def consumer(event: dict[str, Any], context: Any) -> str:
                inv = world.stack[-1]
                world.body_ran(inv, "e:" + event["detail"]["outbox"]["id"][:8], False, 0)
                world.history.add(
                    world.clock.now_ms(),
                    inv.name,
                    "apply",
                    f"consumer applies {event['detail']['k']} of {event['detail']['inv']}",
                    event_id=event["detail"]["outbox"]["id"],
                )
                return "ok"

            env.handlers["consume"] = consumer
        for entry in self.bus:
            if entry["delivered"]:
                continue
            inv = self.invoke("con", env_number, faults)
            context = self.enter(inv, f"consume {entry['id'][:8]}")
            event = {
                "id": str(uuid.uuid4()),
                "account": ACCOUNT,
                "source": entry["Source"],
                "detail-type": entry["DetailType"],
                "detail": json.loads(entry["Detail"]),
            }
            if self.guarded(inv, env.handlers["consume"], event, context) is not None:
                entry["delivered"] = True

    # --- the network ---

    def read_item(self, key: str) -> dict[str, Any] | None:
        return self.observer.get_item(  # type: ignore[no-any-return]
            TableName=self.table, Key=self.schema.key(key), ConsistentRead=True
        ).get("Item")

    def on_send(self, request: Any, operation: str, client: Any) -> Any:
        """Decide the fate of one request of a simulated client."""
        inv = self.stack[-1] if self.stack else None
        if inv is None:
            return None
        if inv.dead:
            raise Crash("dead invocation")
        inv.requests += 1
        body = json.loads(request.body) if request.body else {}
        writes = self.describe(operation, body)
        fault = None
        # A fault names the n-th request of an operation, or of a lifecycle step (whatever
        # request carries it: a completion is a PutItem, a BatchWriteItem or a transaction).
        steps = [operation, *dict.fromkeys(w.op for w in writes if w.op in LIFECYCLE)]
        for name in steps:
            inv.counts[name] = inv.counts.get(name, 0) + 1
            fault = fault or inv.faults.get(f"{name}#{inv.counts[name]}")
        summary = ", ".join(f"{w.op} {self.label(w.key)} as {w.owner_label}" for w in writes)
        self.history.add(
            self.clock.now_ms(),
            inv.name,
            "send",
            f"#{inv.requests} {operation} {summary}" + (f" [{fault}]" if fault else ""),
        )
        if fault is None:
            return self.deliver(inv, request, operation, writes)
        if fault.kind == "throttle":
            return network.error_response(request, 400, "ProvisionedThroughputExceededException")
        if fault.kind == "error":
            return network.error_response(request, 500, "InternalServerError")
        if fault.kind == "crash":
            self.die(inv, f"crashed before request #{inv.requests}")
        if fault.kind == "crash_applied":
            self.deliver(inv, request, operation, writes)
            self.die(inv, f"crashed after request #{inv.requests} was applied")
        if fault.kind == "lost_reply":
            self.deliver(inv, request, operation, writes)
            self.history.add(self.clock.now_ms(), inv.name, "lost", "the reply is lost")
            raise ReadTimeoutError(endpoint_url=request.url)
        return self.hold(inv, fault, request, operation, writes)

    def hold(
        self, inv: Invocation, fault: Fault, request: Any, operation: str, writes: list[Any]
    ) -> Any:
        """Keep the request in flight, run ``fault.during``, then apply it (if it may)."""
        settings = self.envs[inv.env].settings
        now = self.clock.now_ms()
        # The last attempt was sent before Lambda ended the invocation, and no later than
        # botocore's retries allow.
        longest = min(
            network.true_bound_ms(settings),
            inv.deadline_ms - now + network.attempt_ms(settings),
        )
        wanted = fault.ms + (inv.deadline_ms - now if fault.past_deadline else 0)
        held = max(0, min(wanted, longest))
        self.history.add(now, inv.name, "hold", f"request held {held}ms")
        self.advance(held)
        self.run_steps(fault.during)
        response = self.deliver(inv, request, operation, writes)
        if self.clock.now_ms() > inv.deadline_ms:
            self.die(inv, "ended by Lambda at its deadline while the request was out")
        return response

    def label(self, key: str) -> str:
        return self.history.key_label(key)

    def describe(self, operation: str, body: dict[str, Any]) -> list[Any]:
        """Return what a request writes: one `_Change` per item."""
        changes: list[_Change] = []

        def item_change(item: dict[str, Any], kind: str, values: dict[str, Any]) -> None:
            key = item.get(self.schema.idempotency_key_attr, {}).get("S")
            if key is None:
                return
            owner = item.get(self.schema.owner_attr, {}).get("S")
            owner = owner or values.get(":owner", {}).get("S")
            if is_outbox_key(key):
                op = "outbox" if kind == "put" else "mark"
                self.history.name(key, "event " + key.rpartition("#")[2][:8])
            elif kind == "delete":
                op = "release"
            elif kind == "put":
                status = item.get(self.schema.status_attr, {}).get("S")
                op = "complete" if status == "COMPLETED" else "claim"
            else:
                op = "update"
            changes.append(_Change(key, op, owner, self.history.owner_label(key, owner)))

        if operation == "PutItem":
            item_change(body["Item"], "put", body.get("ExpressionAttributeValues", {}))
        elif operation == "DeleteItem":
            item_change(body["Key"], "delete", body.get("ExpressionAttributeValues", {}))
        elif operation == "UpdateItem":
            item_change(body["Key"], "update", body.get("ExpressionAttributeValues", {}))
        elif operation == "BatchWriteItem":
            for requests in body["RequestItems"].values():
                for one in requests:
                    if "PutRequest" in one:
                        item_change(one["PutRequest"]["Item"], "put", {})
                    else:
                        item_change(one["DeleteRequest"]["Key"], "delete", {})
        elif operation == "TransactWriteItems":
            for one in body["TransactItems"]:
                for name, kind in (("Put", "put"), ("Delete", "delete"), ("Update", "update")):
                    if name in one:
                        part = one[name]
                        values = part.get("ExpressionAttributeValues", {})
                        item_change(part.get("Item") or part["Key"], kind, values)
        return changes

    def deliver(self, inv: Invocation, request: Any, operation: str, changes: list[Any]) -> Any:
        """Send the request to moto; record what it changed."""
        # Only the simulated clients write, so the last write's result is the item's state.
        before = {c.key: self.items.get(c.key) for c in changes}
        if operation == "PutEvents":
            entries = json.loads(request.body)["Entries"]
        response = self._http.send(request)
        status = response.status_code
        after = {c.key: self.read_item(c.key) for c in changes}
        self.items.update(after)
        if operation == "PutEvents" and status == 200:
            answered = json.loads(response.content).get("Entries", [])
            for entry, result in zip(entries, answered, strict=False):
                if result.get("EventId"):
                    detail = json.loads(entry["Detail"])
                    event_id = detail["outbox"]["id"]
                    self.bus.append({**entry, "id": event_id, "delivered": False})
                    self.history.add(
                        self.clock.now_ms(),
                        inv.name,
                        "publish",
                        f"event {event_id[:8]} of {detail['k']} by {detail['inv']}",
                        event_id=event_id,
                        k=detail["k"],
                        by=detail["inv"],
                    )
        for change in changes:
            old, new = before[change.key], after[change.key]
            if old == new:
                continue
            write = Write(change.key, change.op, change.owner, old, new)
            self.history.add(
                self.clock.now_ms(),
                inv.name,
                "applied",
                f"{change.op} {self.label(change.key)} by {change.owner_label}: "
                f"{self.describe_item(old)} -> {self.describe_item(new)}",
                write=write,
            )
        return response

    def describe_item(self, item: dict[str, Any] | None) -> str:
        if item is None:
            return "none"
        key = item[self.schema.idempotency_key_attr]["S"]
        if is_outbox_key(key):
            published = "published" if "published_at" in json.dumps(item) else "unpublished"
            return f"outbox({published})"
        status = item.get(self.schema.status_attr, {}).get("S")
        owner = item.get(self.schema.owner_attr, {}).get("S")
        return f"{status}({self.history.owner_label(key, owner)})"


@dataclass
class _Change:
    key: str
    op: str
    owner: str | None
    owner_label: str


def _passes_filter(record: dict[str, Any]) -> bool:
    """Apply the publisher's documented event filter (`STREAM_FILTER_PATTERN`)."""
    if record.get("eventName") not in STREAM_FILTER_PATTERN["eventName"]:
        return False
    return "outbox_id" in record.get("dynamodb", {}).get("NewImage", {})


def _lambda_shape(record: dict[str, Any], stream_arn: str) -> dict[str, Any]:
    change = dict(record["dynamodb"])
    when = change.get("ApproximateCreationDateTime")
    if when is not None and not isinstance(when, int | float):
        change["ApproximateCreationDateTime"] = int(when.timestamp())
    for name in ("Keys", "NewImage", "OldImage"):
        if name in change:
            change[name] = _b64(change[name])
    return {**record, "dynamodb": change, "eventSourceARN": stream_arn}


def _b64(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {k: _b64(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_b64(v) for v in value]
    return value
