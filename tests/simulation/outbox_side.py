"""The outbox side of the world: a decorated handler that emits, the table's stream read as an
event source mapping reads it (the publisher's documented filter, a checkpoint), the publisher,
and EventBridge delivering to a consumer keyed on `event_keys.OUTBOX_EVENT`."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import uuid
from typing import TYPE_CHECKING, Any

from idempotent_lambda import idempotent
from idempotent_lambda._outbox_format import is_outbox_key
from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.event_keys import OUTBOX_EVENT
from idempotent_lambda.metrics import EMFMetrics
from idempotent_lambda.outbox import STREAM_FILTER_PATTERN, emit, publish_handler, sweep_handler
from idempotent_lambda.testing import api_gateway_http_event
from tests.simulation import network
from tests.simulation.program import STREAM_RETENTION_MS, Call, Fault

if TYPE_CHECKING:
    from tests.simulation.world import Env, World

SOURCE = "sim.orders"
ACCOUNT = "123456789012"


class Outbox:
    """The outbox's path through the world, from `emit` to the consumer."""

    def __init__(self, world: World) -> None:
        self.w = world
        self.stream_arn = ""
        self.stream: list[dict[str, Any]] = []  # records in order, with "seen_ms"
        self.stream_seen: set[str] = set()
        self.checkpoint = 0
        self.bus: list[dict[str, Any]] = []  # entries EventBridge accepted, with "delivered"

    def handler(self, env: Env) -> Any:
        if "call" in env.handlers:
            return env.handlers["call"]
        world = self.w

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

        entry = self.w.setup.entry
        if entry == "http":

            @idempotent_http(
                persistence_store=env.store, config=self.w.config(), caller_scope="shared"
            )
            def on_http(event: dict[str, Any], context: Any) -> dict[str, Any]:
                return {"statusCode": 200, "body": json.dumps(body(event))}

            def handler(event: dict[str, Any], context: Any) -> Any:
                response = on_http(api_gateway_http_event(idempotency_key=event["k"]), context)
                if response["statusCode"] != 200:
                    raise RuntimeError(f"HTTP {response['statusCode']}")
                return json.loads(response["body"])

        elif entry == "async":

            @idempotent(persistence_store=env.store, config=self.w.config(event_key_jmespath="k"))
            async def on_async(event: dict[str, Any], context: Any) -> dict[str, Any]:
                return body(event)

            def handler(event: dict[str, Any], context: Any) -> Any:
                return asyncio.run(on_async(event, context))

        else:

            @idempotent(persistence_store=env.store, config=self.w.config(event_key_jmespath="k"))
            def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
                return body(event)

        env.handlers["call"] = handler
        return handler

    def call(self, step: Call) -> None:
        inv = self.w.invoke("inv", step.env, step.faults)
        inv.plan = step
        handler = self.handler(self.w.env(step.env))
        context = self.w.enter(inv, f"call {step.key}")
        answer = self.w.guarded(inv, handler, {"k": step.key}, context)
        if answer is not None:
            self.w.history.add(
                self.w.clock.now_ms(),
                inv.name,
                "answer",
                json.dumps(answer),
                key=step.key,
                **answer,
            )

    def read_stream(self) -> None:
        """Fetch the stream's new records, stamped with the world's time.

        Read from the shard's start every time and keep the sequence numbers not seen yet:
        moto's iterators, read again after more writes, skip or repeat records.
        """
        if not self.stream_arn:
            return
        streams = network.client("dynamodbstreams", self.w.endpoint, "library", -1)
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
                    self.stream[-1]["seen_ms"] = self.w.clock.now_ms()
                if not response["Records"]:
                    break
                iterator = response.get("NextShardIterator")

    def pending_stream(self) -> list[dict[str, Any]]:
        now = self.w.clock.now_ms()
        while (
            self.checkpoint < len(self.stream)
            and now - self.stream[self.checkpoint]["seen_ms"] > STREAM_RETENTION_MS
        ):
            self.w.history.add(now, "-", "trim", "a stream record passed its retention")
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
                        self.w.history.add(
                            self.w.clock.now_ms(),
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
        env = self.w.env(env_number)
        if "publish" not in env.handlers:
            events = network.client("events", self.w.endpoint, "library", env_number)
            metrics = EMFMetrics("sim", stream=io.StringIO())  # not checked: kept off stdout
            env.handlers["publish"] = publish_handler(
                env.store, events_client=events, metrics=metrics
            )
        inv = self.w.invoke("pub", env_number, faults)
        context = self.w.enter(inv, f"publish {len(batch)} record(s)")
        records = [{k: v for k, v in r.items() if k != "seen_ms"} for _, r in batch]
        answer = self.w.guarded(inv, env.handlers["publish"], {"Records": records}, context)
        if answer is None:
            return
        failed = {item["itemIdentifier"] for item in answer["batchItemFailures"]}
        for position, record in batch:
            if record["dynamodb"]["SequenceNumber"] in failed:
                break
            self.checkpoint = position + 1
        self.w.history.add(
            self.w.clock.now_ms(), inv.name, "answer", f"{len(failed)} record(s) to retry"
        )

    def sweep(self, env_number: int, faults: tuple[Fault, ...]) -> None:
        """A scheduled run of the sweeper."""
        env = self.w.env(env_number)
        if "sweep" not in env.handlers:
            events = network.client("events", self.w.endpoint, "library", env_number)
            metrics = EMFMetrics("sim", stream=io.StringIO())
            env.handlers["sweep"] = sweep_handler(env.store, events_client=events, metrics=metrics)
        inv = self.w.invoke("swp", env_number, faults)
        context = self.w.enter(inv, "sweep")
        answer = self.w.guarded(inv, env.handlers["sweep"], {}, context)
        if answer is not None:
            counts = ", ".join(f"{k}={answer[k]}" for k in ("found", "due", "failed"))
            self.w.history.add(self.w.clock.now_ms(), inv.name, "answer", counts)

    def expire_items(self) -> None:
        """Delete the outbox items whose TTL passed, as DynamoDB's TTL does (its stream gets
        the REMOVE records): at the first step after their expiry, not days later."""
        now_s = self.w.clock.now_ms() // 1000
        expiry = self.w.schema.expiry_attr
        for key, item in list(self.w.items.items()):
            if item is None or not is_outbox_key(key) or int(item[expiry]["N"]) > now_s:
                continue
            self.w.observer.delete_item(TableName=self.w.table, Key=self.w.schema.key(key))
            self.w.items[key] = None
            label = self.w.history.key_label(key)
            self.w.history.add(self.w.clock.now_ms(), "-", "ttl", f"TTL deletes {label}")

    def consume(self, env_number: int, faults: tuple[Fault, ...]) -> None:
        """EventBridge delivers each event not yet consumed to the consumer."""
        env = self.w.env(env_number)
        if "consume" not in env.handlers:
            world = self.w

            @idempotent(
                persistence_store=env.store, config=self.w.config(event_key_jmespath=OUTBOX_EVENT)
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
            inv = self.w.invoke("con", env_number, faults)
            context = self.w.enter(inv, f"consume {entry['id'][:8]}")
            event = {
                "id": str(uuid.uuid4()),
                "account": ACCOUNT,
                "source": entry["Source"],
                "detail-type": entry["DetailType"],
                "detail": json.loads(entry["Detail"]),
            }
            if self.w.guarded(inv, env.handlers["consume"], event, context) is not None:
                entry["delivered"] = True


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
