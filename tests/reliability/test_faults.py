"""Fault injection: every lifecycle step x every store fault, against the documented table.

Each scenario decorates a real handler over `DynamoDBPersistenceLayer` with its production
client (built by the store: standard retry mode, 3 attempts, short timeouts) pointed at the moto
server, and makes that client fail one step — claim, complete, release, or the replay read
(``get``, used by wait mode) — with throttling, a 5xx, a read timeout or a refused connection.
Failure modes:

``transient``
    the first attempt fails, botocore's retry succeeds;
``lost-answer``
    the first attempt is applied by the server and its answer lost (timeout, 5xx), the retry
    meets the write it made itself;
``persistent``
    every attempt fails;
``applied-then-persistent``
    the first attempt is applied and every answer is lost.

The observed row (body runs, what the caller gets, the decision logged, the record afterwards,
what a retry sees before and after the lease ends, executions in total) must equal `EXPECTED`,
which is the table in docs/reliability.md (checked by `test_the_documented_table_is_this_one`).
Time is a `ManualClock`: the lease (30 s of remaining Lambda time) passes without sleeping.
"""

from __future__ import annotations

import re
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

import pytest

from idempotent_lambda import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    IdempotencyRecord,
    InMemoryPersistenceLayer,
    Status,
    idempotent,
)
from idempotent_lambda._claim import CLOCK_SKEW_TOLERANCE_MS
from idempotent_lambda.persistence.base import ClaimOutcome, store_for_format
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests.reliability._faults import FAULTS, FaultInjector, RedisReplyDropper
from tests.reliability._support import SECRET, Executions, outcome_of, stored_key

DOC = Path(__file__).parents[2] / "docs" / "reliability.md"
LEASE_MS = 30_000
PREFIX = "faults"
#: Faults after which DynamoDB may have applied the write (the others never reach the table).
AMBIGUOUS = ("server_error", "read_timeout")


@dataclass(frozen=True)
class Row:
    """What one scenario did, in the words of the documented table."""

    body_runs: int
    caller_gets: str
    logged: str
    record_after: str
    retry_before_lease_end: str
    retry_after_lease_end: str
    executions: int


_OK = Row(1, "the result", "CLAIMED", "COMPLETED", "replay", "replay", 1)
_RAISED_AND_RELEASED = Row(
    1, "the body's exception", "RELEASED", "absent", "runs the body", "replay", 2
)
_HOLDER_RESULT = Row(0, "the holder's result", "REPLAYED", "COMPLETED", "replay", "replay", 0)

#: (step, mode) -> the outcome, for every fault that mode applies to.
EXPECTED: dict[tuple[str, str], Row] = {
    ("claim", "transient"): _OK,
    ("claim", "lost-answer"): _OK,
    ("claim", "persistent"): Row(
        0, "IdempotencyPersistenceLayerError", "STORE_ERROR", "absent", "runs the body", "replay", 1
    ),
    # Issue 20: the claim that was written but whose answers were all lost is released (fenced
    # on its owner token), so the retry runs at once instead of waiting for the lease to end.
    ("claim", "applied-then-persistent"): Row(
        0, "IdempotencyPersistenceLayerError", "STORE_ERROR", "absent", "runs the body", "replay", 1
    ),
    ("complete", "transient"): _OK,
    ("complete", "lost-answer"): _OK,
    ("complete", "persistent"): Row(
        1,
        "the result",
        "COMPLETE_FAILED",
        "IN_PROGRESS",
        "IdempotencyAlreadyInProgressError",
        "runs the body (takes over)",
        2,
    ),
    ("complete", "applied-then-persistent"): Row(
        1, "the result", "COMPLETE_FAILED", "COMPLETED", "replay", "replay", 1
    ),
    ("release", "transient"): _RAISED_AND_RELEASED,
    ("release", "lost-answer"): _RAISED_AND_RELEASED,
    ("release", "persistent"): Row(
        1,
        "the body's exception, with a note",
        "RELEASE_FAILED",
        "IN_PROGRESS",
        "IdempotencyAlreadyInProgressError",
        "runs the body (takes over)",
        2,
    ),
    ("release", "applied-then-persistent"): Row(
        1,
        "the body's exception, with a note",
        "RELEASE_FAILED",
        "absent",
        "runs the body",
        "replay",
        2,
    ),
    ("get", "transient"): _HOLDER_RESULT,
    ("get", "persistent"): Row(
        0, "IdempotencyPersistenceLayerError", "STORE_ERROR", "COMPLETED", "replay", "replay", 0
    ),
}


def faults_for(mode: str) -> tuple[str, ...]:
    """Return the faults a failure mode applies to."""
    return AMBIGUOUS if mode in ("lost-answer", "applied-then-persistent") else FAULTS


SCENARIOS = [
    pytest.param(step, mode, fault, id=f"{step}-{mode}-{fault}")
    for (step, mode) in EXPECTED
    for fault in faults_for(mode)
]


class BodyError(Exception):
    """The handler's own failure."""


@pytest.fixture
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shrink botocore's throttling backoff (1 s base) so the suite stays fast.

    The retry loop, its attempt count and its retry quota are untouched; only the sleeps
    between throttled attempts shrink. `test_throttling_with_the_real_backoff` keeps one run
    with the real delays.
    """
    from botocore.retries.standard import ExponentialBackoff

    scaled = dict(ExponentialBackoff._DEFAULT_BACKOFF_CONFIG, throttling_base_scale=0.01)
    monkeypatch.setattr(ExponentialBackoff, "_DEFAULT_BACKOFF_CONFIG", scaled)


@pytest.fixture
def production_store(
    monkeypatch: pytest.MonkeyPatch, dynamodb_endpoint: str, idempotency_table: str
) -> tuple[DynamoDBPersistenceLayer, ManualClock]:
    """Return a store that builds its own client (production retries and timeouts).

    Only the read timeout is raised (3 s in production), so that a loaded machine's slow answer
    is never taken for a fault: the faults this suite studies are the injected ones.
    """
    from botocore.config import Config

    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_endpoint)
    clock = ManualClock()
    patient = Config(read_timeout=60)
    return DynamoDBPersistenceLayer(idempotency_table, clock=clock, boto_config=patient), clock


class Scenario:
    """One decorated handler on the faulty store, and a clean view of the same table."""

    def __init__(
        self,
        store: DynamoDBPersistenceLayer,
        clock: ManualClock,
        clean: DynamoDBPersistenceLayer,
        *,
        wait: bool = False,
    ) -> None:
        self.store, self.clock, self.clean = store, clock, clean
        self.injector = FaultInjector(store._get_client())
        self.executions = Executions()
        self.decisions: list[str] = []
        self.raise_first = False
        self.config = IdempotencyConfig(
            event_key_jmespath="order",
            wait_for_in_progress_seconds=5 if wait else 0,
            decision_hook=lambda decision: self.decisions.append(decision.outcome.value),
        )
        self.clean = store_for_format(clean, self.config.record_format)  # reads the default's

        @idempotent(persistence_store=store, config=self.config, key_prefix=PREFIX)
        def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
            run = self.executions(event["order"])
            if self.raise_first and run == 1:
                raise BodyError("the body failed")
            return {"order": event["order"], "run": run, "card": SECRET}

        self.handler = handler

    def call(self, event: dict[str, Any]) -> tuple[str, Any, int]:
        """Invoke once; return the outcome, and how many times the body ran meanwhile."""
        before = self.executions.total
        kind, value = outcome_of(
            lambda: self.handler(event, FakeLambdaContext(LEASE_MS, clock=self.clock))
        )
        return kind, value, self.executions.total - before

    def record(self, event: dict[str, Any]) -> IdempotencyRecord | None:
        return self.clean.get(stored_key(self.config, event, PREFIX))

    def hold(self, event: dict[str, Any]) -> None:
        """Make another invocation hold the key, and complete it when the waiter first reads."""
        key = stored_key(self.config, event, PREFIX)
        now = self.clock.now_ms()
        holder = IdempotencyRecord(
            idempotency_key=key,
            status=Status.IN_PROGRESS,
            expiry_timestamp=now // 1000 + 3600,
            in_progress_expiry_timestamp=now + LEASE_MS,
            owner="holder",
        )
        assert self.clean.claim(holder, now_ms=now, lease_cutoff_ms=now).claimed
        done = IdempotencyRecord(
            idempotency_key=key,
            status=Status.COMPLETED,
            expiry_timestamp=now // 1000 + 3600,
            response_data=self.config.format.encode_result(
                {"order": event["order"], "run": "holder"}
            ),
            owner="holder",
        )
        finished: list[bool] = []

        def complete_holder(**_: Any) -> None:
            if not finished:
                finished.append(self.clean.complete(done))

        self.injector.client.meta.events.register("before-send.dynamodb.GetItem", complete_holder)


def describe(kind: str, value: Any, ran: int, *, first_result: Any = None) -> str:
    """Name an outcome the way the table does."""
    if kind == "BodyError":
        noted = any(
            "releasing the record failed" in note for note in getattr(value, "__notes__", [])
        )
        return "the body's exception, with a note" if noted else "the body's exception"
    if kind != "result":
        return kind
    if value.get("run") == "holder":
        return "the holder's result"
    return "the result" if ran else "replay"


def retry_outcome(scenario: Scenario, event: dict[str, Any], *, took_over: bool) -> str:
    kind, _, ran = scenario.call(event)
    if kind != "result":
        return kind
    if ran:
        return "runs the body (takes over)" if took_over else "runs the body"
    return "replay"


def run_scenario(scenario: Scenario, step: str, mode: str, fault: str) -> Row:
    """Play one scenario and return what was observed."""
    event = {"order": f"{step}-{mode}-{fault}", "card": SECRET}
    if step == "release":
        scenario.raise_first = True
    if step == "get":
        scenario.hold(event)
    times = None if mode in ("persistent", "applied-then-persistent") else 1
    applied = mode in ("lost-answer", "applied-then-persistent")
    scenario.injector.arm(step, fault, times=times, applied=applied)
    kind, value, ran = scenario.call(event)
    scenario.injector.disarm()
    if times is None:  # every attempt the store's client makes was faulted: its retry budget
        assert 3 == scenario.injector.injected[step]
    caller_gets = describe(kind, value, ran)
    logged = scenario.decisions[0] if scenario.decisions else "-"
    record = scenario.record(event)
    record_after = "absent" if record is None else record.status.value

    scenario.clock.advance(ms=1)
    before = retry_outcome(scenario, event, took_over=False)
    scenario.clock.advance(ms=LEASE_MS + CLOCK_SKEW_TOLERANCE_MS + 1)
    after = retry_outcome(scenario, event, took_over=before == "IdempotencyAlreadyInProgressError")
    return Row(ran, caller_gets, logged, record_after, before, after, scenario.executions.total)


@pytest.mark.usefixtures("fast_backoff")
@pytest.mark.parametrize(("step", "mode", "fault"), SCENARIOS)
def test_fault_outcome_matches_the_documented_table(
    step: str,
    mode: str,
    fault: str,
    production_store: tuple[DynamoDBPersistenceLayer, ManualClock],
    dynamodb_store: DynamoDBPersistenceLayer,
) -> None:
    """The observed outcome of a store fault on one step is the documented one."""
    store, clock = production_store
    scenario = Scenario(store, clock, dynamodb_store, wait=step == "get")
    assert EXPECTED[step, mode] == run_scenario(scenario, step, mode, fault)
    final = scenario.record({"order": f"{step}-{mode}-{fault}"})
    assert final is not None
    assert Status.COMPLETED is final.status


def test_throttling_with_the_real_backoff(
    production_store: tuple[DynamoDBPersistenceLayer, ManualClock],
    dynamodb_store: DynamoDBPersistenceLayer,
) -> None:
    """With botocore's real throttling backoff, a throttled claim still ends as documented."""
    store, clock = production_store
    scenario = Scenario(store, clock, dynamodb_store)
    assert EXPECTED["claim", "persistent"] == run_scenario(
        scenario, "claim", "persistent", "throttled"
    )


def markdown_rows() -> list[str]:
    """Return the fault table's rows as they appear in docs/reliability.md."""
    rows = []
    for (step, mode), row in EXPECTED.items():
        faults = ", ".join(faults_for(mode)) if mode != "transient" else "any"
        cells = [step, mode, faults, *(str(cell) for cell in astuple(row))]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def test_the_documented_table_is_this_one() -> None:
    """docs/reliability.md carries exactly the table these tests check."""
    text = DOC.read_text(encoding="utf-8")
    documented = [
        re.sub(r"\s+", " ", line.strip())
        for line in text.splitlines()
        if re.match(r"\| (claim|complete|release|get) \|", line)
    ]
    assert markdown_rows() == documented


class LostAnswerStore:
    """An in-memory store whose claim answers are lost once: the write happens, and the
    retried claim (what botocore does) reports the key held by the record it just wrote."""

    def __init__(self) -> None:
        self._store = InMemoryPersistenceLayer()
        self.clock = self._store.clock
        self.complete, self.release, self.get = (
            self._store.complete,
            self._store.release,
            self._store.get,
        )

    def claim(
        self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int
    ) -> ClaimOutcome:
        self._store.claim(record, now_ms=now_ms, lease_cutoff_ms=lease_cutoff_ms)
        return self._store.claim(record, now_ms=now_ms, lease_cutoff_ms=lease_cutoff_ms)


def test_a_claim_blocked_by_its_own_record_is_ours() -> None:
    """Regression: the retry of a claim whose answer was lost met its own IN_PROGRESS record,
    and the caller got IdempotencyAlreadyInProgressError (the key then stayed blocked, with
    nobody running, until the lease ended). Now the engine recognises its owner token."""
    executions = Executions()

    @idempotent(persistence_store=LostAnswerStore(), key_prefix="own-claim")
    def handler(event: Any, context: Any) -> str:
        executions("run")
        return "done"

    assert "done" == handler({"card": SECRET}, None)
    assert "done" == handler({"card": SECRET}, None)
    assert 1 == executions.total


@pytest.mark.usefixtures("fast_backoff")
@pytest.mark.parametrize("fault", FAULTS)
def test_http_adapter_answers_a_failed_claim_with_503(
    fault: str, production_store: tuple[DynamoDBPersistenceLayer, ManualClock]
) -> None:
    """Through the HTTP adapter, a claim the store keeps failing is a 503 + Retry-After: 1,
    and the handler does not run; once the store recovers, the retry runs it once."""
    from idempotent_lambda.adapters.api_gateway import idempotent_http
    from tests.events import http_events as ev

    store, clock = production_store
    injector = FaultInjector(store._get_client())
    executions = Executions()

    @idempotent_http(persistence_store=store, key_prefix="faults-http")
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        executions("run")
        return {"statusCode": 201, "body": SECRET}

    event = ev.make_event("apigateway-v2", key=f"http-{fault}")
    injector.arm("claim", fault)
    refused = handler(event, FakeLambdaContext(LEASE_MS, clock=clock))
    injector.disarm()
    assert (503, "1") == (refused["statusCode"], refused["headers"]["Retry-After"])
    assert 0 == executions.total
    assert 201 == handler(event, FakeLambdaContext(LEASE_MS, clock=clock))["statusCode"]
    assert 1 == executions.total


#: A line of the claim scripts (both layouts) and of no other script the Redis store sends.
REDIS_CLAIM_MARKER = b"local abandoned ="


@pytest.mark.parametrize("lost", ["every-answer", "first-answer"])
def test_a_redis_claim_applied_but_unanswered_is_undone(redis_port: int, lost: str) -> None:
    """Regression (issue 20): the claim script ran on a real redis-server, but its connection
    dropped before the reply (a failover), on every attempt redis-py made. The caller got the
    store error and its own IN_PROGRESS record then refused every retry until the lease ended.
    Now the engine releases it (fenced on its owner token): the record is gone and the retry
    runs the body. When only the first answer is lost, redis-py's retry meets the claim it made
    itself, and the call runs as if nothing had happened."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from idempotent_lambda.persistence.redis import RedisCachePersistenceLayer

    proxy = RedisReplyDropper(redis_port)
    direct = redis.Redis(host="127.0.0.1", port=redis_port)
    client = redis.Redis(host="127.0.0.1", port=proxy.port, retry=Retry(NoBackoff(), 2))
    decisions: list[str] = []
    config = IdempotencyConfig(
        event_key_jmespath="order", decision_hook=lambda d: decisions.append(d.outcome.value)
    )
    executions = Executions()
    prefix = f"redis-{lost}"

    @idempotent(
        persistence_store=RedisCachePersistenceLayer(client=client),
        config=config,
        key_prefix=prefix,
    )
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        executions(event["order"])
        return {"order": event["order"], "card": SECRET}

    event = {"order": prefix, "card": SECRET}
    key = stored_key(config, event, prefix)
    try:
        proxy.arm(REDIS_CLAIM_MARKER, times=None if lost == "every-answer" else 1)
        kind, _ = outcome_of(lambda: handler(event, FakeLambdaContext(LEASE_MS)))
        proxy.disarm()
        after_first = (kind, decisions[0], bool(direct.exists(key)), executions.total)
        retry_kind, _ = outcome_of(lambda: handler(event, FakeLambdaContext(LEASE_MS)))
    finally:
        client.close()
        direct.close()
        proxy.close()

    if lost == "every-answer":
        assert 3 == proxy.dropped  # the first attempt and redis-py's two retries
        assert ("IdempotencyPersistenceLayerError", "STORE_ERROR", False, 0) == after_first
    else:
        assert 1 == proxy.dropped
        assert ("result", "CLAIMED", True, 1) == after_first
    assert ("result", 1) == (retry_kind, executions.total)
