"""A simulated run as data: the world's settings and the steps, all drawn from one seed.

A program is plain frozen data, so a failing one can be printed, shrunk (`shrink`) and run
again. Faults name an invocation's n-th store request: inside one invocation the simulator
runs every thread's work at the point it is handed out (`world.inline_pools`), so the n-th
request is the same one on every run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from idempotent_lambda._claim import CLOCK_SKEW_TOLERANCE_MS

#: Where the world's clock starts (2026-01-01T00:00:00Z).
START_MS = 1_767_225_600_000
#: Botocore settings a store's client may have (see `world.CLIENT_CONFIGS`).
CLIENTS = ("library", "defaults", "legacy-fast")
FORMATS = ("powertools", "native")
WORKLOADS = ("batch", "outbox")
#: The entry points of the outbox workload: `idempotent` on a function, on an `async def`,
#: and `idempotent_http` (the key in the ``Idempotency-Key`` header).
ENTRIES = ("sync", "async", "http")
#: The batch sources (`sources.Source`); SQS standard drawn twice as often.
SOURCES = ("sqs", "sqs", "fifo", "stream", "kinesis", "kafka")
#: The request bound the library read for each client when the simulator was written (the
#: lease a grouped completion needed, less the tolerance): leases just past it are drawn often.
#: Fixed here, so that a change of the library's reading does not change the programs.
EDGES = {"library": 18_000, "defaults": 615_000, "legacy-fast": 25_000}
#: Faults on one store request (see `world.World.on_send`); a hold twice as likely.
FAULTS = ("hold", "hold", "throttle", "error", "lost_reply", "crash", "crash_applied")
#: The requests each kind of invocation makes, which faults name.
OPERATIONS = {
    "poll": ("claim", "complete", "BatchWriteItem", "BatchGetItem", "release", "PutItem"),
    "call": ("claim", "complete", "TransactWriteItems", "GetItem", "release"),
    "publish": ("BatchGetItem", "UpdateItem", "PutEvents"),
    "consume": ("PutItem", "GetItem"),
    "durable": ("claim", "complete", "GetItem", "release"),
}
#: The sweep's seeds from here on draw the durable workload (`generate`), so that adding it
#: changed no other seed's program.
DURABLE_FIRST = 1_000_001
#: And the sweep's seeds from here on run the batch or durable workload on the in-memory store.
MEMORY_FIRST = 2_000_001
#: And from here on on the Redis store (`redis_side`), every fault kept (the commands go
#: through the simulated wire).
REDIS_FIRST = 3_000_001
#: And from here on the outbox workload with the sweeper: the stream's mapping stuck past the
#: stream's retention, the scheduled sweeper, outbox items deleted by TTL (`_with_sweeper`).
SWEEPER_FIRST = 4_000_001
#: How long a table stream keeps a record.
STREAM_RETENTION_MS = 24 * 3600 * 1000
#: And from here on the batch workload with every result offloaded to S3 (`_with_offload`).
OFFLOAD_FIRST = 5_000_001


@dataclass(frozen=True)
class Fault:
    """What the network (or Lambda) does to an invocation's ``at``-th store request.

    ``hold``: the request is in flight ``ms`` (clamped to what botocore and Lambda allow), and
    ``during`` runs meanwhile. ``throttle`` / ``error``: answered 400 throttled / 500, not
    applied. ``lost_reply``: applied, then the reply is lost (a read timeout). ``crash``: the
    invocation dies before sending; ``crash_applied``: it dies after the write was applied.
    """

    at: str  # "<operation>#<n>": the invocation's n-th request of that operation
    kind: str
    ms: int = 0
    past_deadline: bool = False  # hold: ``ms`` counts from the invocation's deadline
    during: tuple[Step, ...] = ()

    def __str__(self) -> str:
        extra = ""
        if self.kind == "hold":
            extra = f" until deadline+{self.ms}ms" if self.past_deadline else f" {self.ms}ms"
        inner = f" during [{'; '.join(map(str, self.during))}]" if self.during else ""
        return f"{self.at}:{self.kind}{extra}{inner}"


@dataclass(frozen=True)
class Poll:
    """A batch source's poller takes up to ``batch`` records and invokes environment ``env``.
    A body takes ``body_ms``; the one at ``crash_body`` (its index in the batch) kills the
    invocation; the one at ``fail_body`` raises."""

    env: int
    batch: int = 10
    body_ms: int = 0
    crash_body: int | None = None
    faults: tuple[Fault, ...] = ()
    fail_body: int | None = None

    def __str__(self) -> str:
        text = _step("poll", self.env, self.faults, self.body_ms, self.crash_body, self.batch)
        return text + (f" fail-in-body#{self.fail_body}" if self.fail_body is not None else "")


@dataclass(frozen=True)
class Call:
    """A direct invocation of the decorated handler for key ``key`` (its body emits one
    outbox event naming the invocation)."""

    env: int
    key: str
    body_ms: int = 0
    crash_body: bool = False
    faults: tuple[Fault, ...] = ()
    fail_body: bool = False

    def __str__(self) -> str:
        crash = 0 if self.crash_body else None
        text = f"call {self.key} " + _step("", self.env, self.faults, self.body_ms, crash, None)
        return text + (" fail-in-body" if self.fail_body else "")


@dataclass(frozen=True)
class DCall:
    """The service invokes durable execution ``execution`` (of the payload ``key``): its first
    invocation, or a replay. Its handler runs a durable step (the body: ``body_ms``, may crash
    or raise) and, with ``wait``, a durable wait that suspends the first time."""

    env: int
    execution: str
    key: str
    body_ms: int = 0
    crash_body: bool = False
    faults: tuple[Fault, ...] = ()
    fail_body: bool = False
    wait: bool = False

    def __str__(self) -> str:
        crash = 0 if self.crash_body else None
        text = f"durable {self.execution} {self.key} "
        text += _step("", self.env, self.faults, self.body_ms, crash, None)
        return text + (" fail-in-step" if self.fail_body else "") + (" wait" if self.wait else "")


@dataclass(frozen=True)
class Publish:
    """The table stream's poller hands the publisher what passed the documented filter."""

    env: int
    faults: tuple[Fault, ...] = ()

    def __str__(self) -> str:
        return _step("publish", self.env, self.faults, 0, None, None)


@dataclass(frozen=True)
class Sweep:
    """The scheduled sweeper (`outbox.sweep_handler`) publishes what the stream did not bring."""

    env: int
    faults: tuple[Fault, ...] = ()

    def __str__(self) -> str:
        return _step("sweep", self.env, self.faults, 0, None, None)


@dataclass(frozen=True)
class Consume:
    """EventBridge delivers each published event not yet delivered to the consumer."""

    env: int
    faults: tuple[Fault, ...] = ()

    def __str__(self) -> str:
        return _step("consume", self.env, self.faults, 0, None, None)


@dataclass(frozen=True)
class Tick:
    """Time passes."""

    ms: int

    def __str__(self) -> str:
        return f"tick {self.ms}ms"


Step = Poll | Call | DCall | Publish | Sweep | Consume | Tick


def _step(
    name: str,
    env: int,
    faults: tuple[Fault, ...],
    body_ms: int,
    crash: int | None,
    batch: int | None,
) -> str:
    parts = [f"{name}@env{env}".strip()]
    if batch is not None and batch != 10:
        parts.append(f"batch={batch}")
    if body_ms:
        parts.append(f"body={body_ms}ms")
    if crash is not None:
        parts.append(f"crash-in-body#{crash}")
    parts.extend(str(fault) for fault in faults)
    return " ".join(parts)


@dataclass(frozen=True)
class Setup:
    """The world's fixed settings."""

    workload: str
    record_format: str
    client: str
    timeout_ms: int
    skews: tuple[int, ...]
    keys: int
    expires_s: int = 3600
    source: str = "sqs"
    lanes: int = 1
    entry: str = "sync"  # the call workload's entry point: sync, async or http
    store: str = "dynamodb"  # or "memory" (`memory_side`) or "redis" (`redis_side`)
    offload: bool = False  # every result offloaded to S3 (native format, DynamoDB)
    sweeper: bool = False  # outbox: the table has the sweeper's index; `Sweep` steps run it
    outer: bool = True  # durable: the handler is decorated with `idempotent` too
    refuse: bool = False  # outbox: EventBridge refuses single entries (`wire.Refusals`)

    def __str__(self) -> str:
        what = self.workload
        if self.workload == "batch":
            what = f"batch source={self.source} lanes={self.lanes}"
        elif self.entry != "sync":
            what = f"{self.workload} entry={self.entry}"
        if self.workload == "durable" and not self.outer:
            what = f"{what} steps-only"
        if self.store != "dynamodb":
            what = f"{what} store={self.store}"
        if self.sweeper:
            what = f"{what} sweeper"
        if self.offload:
            what = f"{what} results-in-s3"
        if self.refuse:
            what = f"{what} eventbridge-refuses-entries"
        return (
            f"{what} format={self.record_format} client={self.client} "
            f"timeout={self.timeout_ms}ms skews={list(self.skews)} keys={self.keys} "
            f"expires={self.expires_s}s"
        )


@dataclass(frozen=True)
class Program:
    """A whole run."""

    seed: int
    setup: Setup
    steps: tuple[Step, ...] = field(default=())

    def render(self) -> str:
        """Return the program, one step a line."""
        return "\n".join([f"seed {self.seed}: {self.setup}", *(f"  {s}" for s in self.steps)])

    def with_steps(self, steps: tuple[Step, ...]) -> Program:
        """Return this program with other steps."""
        return replace(self, steps=steps)


TOLERANCE = CLOCK_SKEW_TOLERANCE_MS


def generate(seed: int, workload: str | None = None) -> Program:
    """Draw a program from ``seed`` (the workload too, unless given)."""
    if seed >= OFFLOAD_FIRST:
        return _with_offload(seed)
    if seed >= SWEEPER_FIRST:
        return _with_sweeper(seed)
    if seed >= REDIS_FIRST:
        return _on_redis(seed, workload)
    if seed >= MEMORY_FIRST:
        return _on_memory(seed, workload)
    rng = random.Random(seed)
    if workload is None and seed >= DURABLE_FIRST:
        workload = "durable"
    workload = workload or rng.choice(WORKLOADS)
    client = rng.choice(CLIENTS)
    # The edge: just more lease than the library needs to group a completion.
    edge = min(900_000, EDGES[client] + TOLERANCE + rng.randint(1, 5_000))
    timeout_ms = rng.choice((20_000, 60_000, 300_000, 900_000, edge))
    skews = tuple(rng.choice((0, 0, -TOLERANCE // 2, TOLERANCE // 2)) for _ in range(3))
    setup = Setup(
        workload=workload,
        record_format=rng.choice(FORMATS),
        client=client,
        timeout_ms=timeout_ms,
        skews=skews,
        keys=rng.randint(1, 3) if workload != "batch" else rng.randint(1, 5),
        expires_s=rng.choice((60, 600, 3600)),
        source=rng.choice(SOURCES),
        lanes=rng.randint(1, 2),
    )
    draw = _DRAWS[workload]
    steps = tuple(draw(rng, setup, depth=0) for _ in range(rng.randint(3, 9)))
    # Drawn apart, so that adding it changed no other seed's program.
    setup = replace(setup, entry=random.Random(seed + 1_000_003).choice(ENTRIES))
    if workload == "outbox":  # half the buses refuse single entries of a PutEvents
        setup = replace(setup, refuse=random.Random(seed + 3_000_007).random() < 0.5)
    if workload == "durable":  # a third of the handlers run their step alone
        setup = replace(setup, outer=random.Random(seed + 2_000_003).random() >= 1 / 3)
    return Program(seed, setup, steps)


def _on_memory(seed: int, workload: str | None) -> Program:
    """A batch or durable program on the in-memory store: only Lambda's faults at a store
    call (no network: no throttles, errors or lost replies)."""
    workload = workload or random.Random(seed).choice(("batch", "durable"))
    drawn = generate(seed - MEMORY_FIRST + 1, workload)
    setup = replace(drawn.setup, store="memory")
    return Program(seed, setup, tuple(_memory_step(step) for step in drawn.steps))


def _with_offload(seed: int) -> Program:
    """Seed n's batch program with every result offloaded to S3 (threshold 0, so each
    completion first puts its object): its faults on reads and single writes move to the
    completion's ``PutObject`` (a grouped completion's too), so that it is held, fails or loses
    its reply."""
    drawn = generate(seed - OFFLOAD_FIRST + 1, "batch")
    setup = replace(drawn.setup, record_format="native", offload=True)
    return Program(seed, setup, tuple(_renamed(step, _TO_S3) for step in drawn.steps))


_TO_S3 = {"BatchGetItem": "PutObject", "PutItem": "PutObject", "BatchWriteItem": "PutObject"}


def _renamed(step: Step, names: dict[str, str]) -> Step:
    """Return ``step`` with the operations its faults name (nested steps' too) renamed by
    ``names``; of two faults that now name one request, the first is kept."""
    if isinstance(step, Tick):
        return step
    kept = {}
    for fault in step.faults:
        name, _, n = fault.at.partition("#")
        at = f"{names.get(name, name)}#{n}"
        if at not in kept:
            during = tuple(_renamed(s, names) for s in fault.during)
            kept[at] = replace(fault, at=at, during=during)
    return replace(step, faults=tuple(kept.values()))  # type: ignore[arg-type]


def _with_sweeper(seed: int) -> Program:
    """An outbox program of the same draw, the sweeper's: half its stream publications are
    sweeper runs, and at one point the stream's mapping stalls past the stream's retention
    (a tick of a day and up to three hours), so that what it held is trimmed unpublished."""
    drawn = generate(seed - SWEEPER_FIRST + 1, "outbox")
    rng = random.Random(seed)
    steps: list[Step] = [
        Sweep(step.env, step.faults) if isinstance(step, Publish) and rng.random() < 0.5 else step
        for step in drawn.steps
    ]
    stall = Tick(STREAM_RETENTION_MS + rng.randint(1, 3 * 3600 * 1000))
    steps.insert(rng.randint(0, len(steps)), stall)
    steps.insert(rng.randint(0, len(steps)), Sweep(rng.randint(0, 2)))
    # Two publishers of one event: the first's mark (or its PutEvents) held while the second
    # (the stream's mapping again, or the sweeper) publishes and marks it.
    other: Step = rng.choice((Publish(rng.randint(0, 2)), Sweep(rng.randint(0, 2))))
    at = rng.choice(("UpdateItem#1", "PutEvents#1"))
    held = Fault(at, "hold", rng.randint(1, 3_000), False, (other,))
    steps.insert(rng.randint(0, len(steps)), Publish(rng.randint(0, 2), (held,)))
    return Program(seed, replace(drawn.setup, sweeper=True), tuple(steps))


def _on_redis(seed: int, workload: str | None) -> Program:
    """A batch or durable program on the Redis store: the DynamoDB program of the same draw,
    its faults renamed to the Redis store's steps (a grouped completion is a completion)."""
    workload = workload or random.Random(seed).choice(("batch", "durable"))
    drawn = generate(seed - REDIS_FIRST + 1, workload)
    setup = replace(drawn.setup, store="redis")
    return Program(seed, setup, tuple(_renamed(step, _ON_REDIS) for step in drawn.steps))


_ON_REDIS = {"BatchWriteItem": "complete", "TransactWriteItems": "complete", "PutItem": "claim"}


def _memory_step(step: Step) -> Step:
    if isinstance(step, Tick):
        return step
    kept = {}
    for fault in step.faults:
        # A grouped completion is a BatchWriteItem on DynamoDB, a completion here.
        at = fault.at.replace("BatchWriteItem", "complete").replace(
            "TransactWriteItems", "complete"
        )
        if fault.kind in ("crash", "crash_applied", "hold") and at not in kept:
            during = tuple(_memory_step(s) for s in fault.during)
            kept[at] = replace(fault, at=at, during=during)
    return replace(step, faults=tuple(kept.values()))  # type: ignore[arg-type]


def _faults(rng: random.Random, setup: Setup, depth: int, invocation: str) -> tuple[Fault, ...]:
    faults = []
    for _ in range(rng.choice((0, 0, 1, 1, 2))):
        kind = rng.choice(FAULTS)
        at = f"{rng.choice(OPERATIONS[invocation])}#{rng.choice((1, 1, 2))}"
        if kind != "hold":
            faults.append(Fault(at, kind))
            continue
        past = rng.random() < 0.5
        if past:
            ms = rng.randint(1, 3_000)
        else:
            ms = rng.choice(
                (rng.randint(1, 3_000), setup.timeout_ms // 2, rng.randint(1, setup.timeout_ms))
            )
        draw = _DRAWS[setup.workload]
        during: tuple[Step, ...] = ()
        if depth < 1 and rng.random() < 0.6:
            during = tuple(draw(rng, setup, depth + 1) for _ in range(rng.randint(1, 2)))
        faults.append(Fault(at, kind, ms, past, during))
    unique = {fault.at: fault for fault in faults}
    return tuple(sorted(unique.values(), key=lambda fault: fault.at))


def _race(rng: random.Random, setup: Setup, step: Step, again: Step) -> Step:
    """A template worth weighting: ``step``'s completion is held past its deadline while
    ``again`` (a redelivery, a duplicate) runs."""
    at = rng.choice(("BatchWriteItem#1", "complete#1"))
    if rng.random() < 0.5:  # the newer owner dies before completing: its claim is what's hit
        again = replace(again, faults=(Fault("complete#1", "crash"),))  # type: ignore[arg-type]
    hold = Fault(at, "hold", rng.randint(1, 3_000), True, (again,))
    return replace(step, faults=(hold,))  # type: ignore[arg-type]


def _tick(rng: random.Random, setup: Setup) -> Tick:
    return Tick(
        rng.choice(
            (
                rng.randint(1, 2_000),
                setup.timeout_ms + TOLERANCE + rng.randint(1, 2_000),
                setup.expires_s * 1000 + rng.randint(0, 2_000),
            )
        )
    )


def _body_ms(rng: random.Random, setup: Setup) -> int:
    return rng.choice((0, 0, rng.randint(1, 500), rng.randint(1, setup.timeout_ms + 2_000)))


def _SQS(rng: random.Random, setup: Setup, depth: int) -> Step:
    if rng.random() < 0.3:
        return _tick(rng, setup)
    crash = rng.randint(0, 2) if rng.random() < 0.15 else None
    fail = rng.randint(0, 2) if rng.random() < 0.2 else None
    step = Poll(
        env=rng.randint(0, 2),
        batch=rng.choice((1, 10)),
        body_ms=_body_ms(rng, setup),
        crash_body=crash,
        faults=_faults(rng, setup, depth, "poll"),
        fail_body=fail,
    )
    if depth == 0 and rng.random() < 0.2:
        return _race(rng, setup, step, Poll(env=rng.randint(0, 2)))
    if depth == 0 and rng.random() < 0.1:  # dies once its first completion is written
        return replace(step, faults=(Fault("complete#1", "crash_applied"),))
    return step


def _OUTBOX(rng: random.Random, setup: Setup, depth: int) -> Step:
    roll = rng.random()
    if roll < 0.25:
        return _tick(rng, setup)
    if roll < 0.45:
        return Publish(rng.randint(0, 2), _faults(rng, setup, depth, "publish"))
    if roll < 0.55:
        return Consume(rng.randint(0, 2), _faults(rng, setup, depth, "consume"))
    key = f"k{rng.randint(1, setup.keys)}"
    step = Call(
        env=rng.randint(0, 2),
        key=key,
        body_ms=_body_ms(rng, setup),
        crash_body=rng.random() < 0.1,
        faults=_faults(rng, setup, depth, "call"),
        fail_body=rng.random() < 0.1,
    )
    if depth == 0 and rng.random() < 0.15:
        return _race(rng, setup, step, Call(env=rng.randint(0, 2), key=key))
    return step


def _DURABLE(rng: random.Random, setup: Setup, depth: int) -> Step:
    if rng.random() < 0.25:
        return _tick(rng, setup)
    key = f"k{rng.randint(1, setup.keys)}"
    execution = f"e{rng.randint(1, 2)}{key}"  # two executions of each payload
    step = DCall(
        env=rng.randint(0, 2),
        execution=execution,
        key=key,
        body_ms=_body_ms(rng, setup),
        crash_body=rng.random() < 0.1,
        faults=_faults(rng, setup, depth, "durable"),
        fail_body=rng.random() < 0.15,
        wait=rng.random() < 0.5,
    )
    if depth == 0 and rng.random() < 0.15:
        other = f"e{3 - int(execution[1])}{key}"
        return _race(rng, setup, step, DCall(env=rng.randint(0, 2), execution=other, key=key))
    return step


_DRAWS = {"batch": _SQS, "outbox": _OUTBOX, "durable": _DURABLE}
