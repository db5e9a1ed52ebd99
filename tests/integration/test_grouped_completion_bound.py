"""Grouped completions on a bound that holds (DESIGN §14), on moto's server with botocore's real
retry handlers: a ``before-send`` hook of the tests' own throttles or leaves items unprocessed,
and botocore's pauses move the test's clock instead of sleeping."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import boto3.session
import botocore.endpoint
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, IdempotencyRecord, Status
from idempotent_lambda._claim import CLOCK_SKEW_TOLERANCE_MS
from idempotent_lambda._observability import Decision
from idempotent_lambda.adapters.kafka import KafkaRecord, idempotent_kafka_handler
from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler
from idempotent_lambda.testing import (
    FakeLambdaContext,
    KafkaRecordFields,
    ManualClock,
    SQSMessageFields,
    kafka_event,
    sqs_event,
)

START_MS = 1_767_225_600_000


class _Body:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Any:
        yield self._data


def _answer(request: Any, status: int, body: dict[str, Any], **headers: str) -> AWSResponse:
    return AWSResponse(
        request.url,
        status,
        {"Content-Type": "application/x-amz-json-1.0", "x-amzn-RequestId": "hook", **headers},
        _Body(json.dumps(body).encode()),
    )


def _operation(request: Any) -> str:
    target = request.headers.get("X-Amz-Target", b"")
    return str(target.decode() if isinstance(target, bytes) else target).rpartition(".")[2]


def _records(client: Any, table: str, record_format: str = "powertools") -> list[IdempotencyRecord]:
    view = DynamoDBPersistenceLayer(table, boto3_client=client).with_record_format(record_format)
    items = client.scan(TableName=table, ConsistentRead=True)["Items"]
    return [view._schema.from_item(item) for item in items]


def _event(count: int, start: int = 0) -> dict[str, Any]:
    numbers = range(start, start + count)
    messages = [SQSMessageFields(body={"n": n}, message_id=f"m-{n}") for n in numbers]
    return sqs_event(records=messages)


@pytest.fixture
def botocore_sleeps(monkeypatch: pytest.MonkeyPatch) -> Callable[[ManualClock], None]:
    """Make botocore's retry pauses move a `ManualClock` instead of sleeping."""

    def use(clock: ManualClock) -> None:
        class Time:
            @staticmethod
            def sleep(seconds: float) -> None:
                clock.advance(seconds)

        monkeypatch.setattr(botocore.endpoint, "time", Time)

    return use


def _client(endpoint: str, config: Config | None = None) -> Any:
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    return session.client("dynamodb", endpoint_url=endpoint, config=config)


class Takeover:
    """Throttles BatchWriteItem: each attempt takes ``attempt_s`` on the clock (a timeout), and
    once the lease is past, another invocation takes the key over; the last attempt goes on."""

    def __init__(
        self, clock: ManualClock, table: str, other: Any, attempt_s: float, attempts: int
    ) -> None:
        self.clock, self.table, self.other = clock, table, other
        self.attempt_s, self.attempts = attempt_s, attempts
        self.sent = 0
        self.taken = False
        self.lease_end_ms = 0
        self.record_format = "powertools"

    def take_over(self) -> None:
        """Claim every record of the table for "another-invocation", if its lease is past."""
        now = self.clock.now_ms()
        view = DynamoDBPersistenceLayer(self.table, boto3_client=self.other).with_record_format(
            self.record_format
        )
        for record in _records(self.other, self.table, self.record_format):
            claim = IdempotencyRecord(
                record.idempotency_key,
                Status.IN_PROGRESS,
                now // 1000 + 3600,
                now + 600_000,
                None,
                None,
                "another-invocation",
            )
            outcome = view.claim(claim, now_ms=now, lease_cutoff_ms=now - CLOCK_SKEW_TOLERANCE_MS)
            self.taken = self.taken or outcome.claimed

    def before_send(self, request: Any, **_: Any) -> AWSResponse | None:
        if _operation(request) != "BatchWriteItem":
            return None
        self.sent += 1
        self.clock.advance(self.attempt_s)
        if self.clock.now_ms() > self.lease_end_ms + CLOCK_SKEW_TOLERANCE_MS:
            self.take_over()
        if self.sent >= self.attempts:
            return None
        code = "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"
        return _answer(request, 400, {"__type": code}, **{"x-amz-retry-after": "5000"})


@pytest.mark.parametrize(
    "case", ["legacy_user_client", "legacy_from_environment", "own_client_lowered_timeouts"]
)
def test_a_grouped_completion_never_overwrites_a_newer_owner(
    idempotency_table: str,
    dynamodb_endpoint: str,
    dynamodb_client: Any,
    botocore_sleeps: Callable[[ManualClock], None],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    case: str,
) -> None:
    """A lease longer than the old bound but shorter than what botocore really may take: were
    the completion grouped on that client, botocore's retries would land it after a takeover.
    The user's legacy client's completions are conditional instead, and the handler warns once,
    naming the bound and the lease; the store's own client groups through a one-attempt
    client, whose throttled request is not retried by botocore."""
    clock = ManualClock(START_MS)
    botocore_sleeps(clock)
    if case.startswith("legacy"):
        # DynamoDB's legacy policy: 10 attempts, 25.55 s of pauses; 1 + 1 s per attempt
        config = Config(connect_timeout=1, read_timeout=1, retries={"mode": "legacy"})
        if case == "legacy_from_environment":
            monkeypatch.setenv("AWS_RETRY_MODE", "legacy")
            config = Config(connect_timeout=1, read_timeout=1)
        client = _client(dynamodb_endpoint, config)
        store = DynamoDBPersistenceLayer(idempotency_table, boto3_client=client, clock=clock)
        lease_ms, attempts = 27_000, 10
    else:
        # the store's client, standard mode: 3 attempts, pauses raised to x-amz-retry-after
        monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_endpoint)
        config = Config(connect_timeout=1, read_timeout=1)
        store = DynamoDBPersistenceLayer(idempotency_table, boto_config=config, clock=clock)
        client = store.client
        lease_ms, attempts = 12_000, 3
    hook = Takeover(clock, idempotency_table, dynamodb_client, 2.0, attempts)
    hook.lease_end_ms = START_MS + CLOCK_SKEW_TOLERANCE_MS + lease_ms
    client.meta.events.register("before-send.dynamodb", hook.before_send)

    @idempotent_sqs_handler(persistence_store=store)
    def handler(record: SQSRecord, context: Any) -> int:
        return int(record.json_body["n"])

    context = FakeLambdaContext(CLOCK_SKEW_TOLERANCE_MS + lease_ms, clock=clock)
    with caplog.at_level(logging.WARNING, logger="idempotent_lambda.batch"):
        assert {"batchItemFailures": []} == handler(_event(2), context)
        if case.startswith("legacy"):  # a second batch: no second warning
            again = FakeLambdaContext(CLOCK_SKEW_TOLERANCE_MS + lease_ms, clock=clock)
            assert {"batchItemFailures": []} == handler(_event(2, start=2), again)
    records = _records(dynamodb_client, idempotency_table)
    assert (4 if case.startswith("legacy") else 2) == len(records)
    if hook.taken:  # the newer owner's claims stand
        assert {"another-invocation"} == {r.owner for r in records}
    else:  # the completions were written before any takeover could happen
        assert {Status.COMPLETED} == {r.status for r in records}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if case.startswith("legacy"):  # 46 s: no completion of this lease can go grouped
        (warning,) = warnings
        bound_s = round(store.unconditional_write_ms() / 1000)  # type: ignore[operator]
        assert f"({bound_s} s," in warning
        assert f"({lease_ms // 1000 + 1} s left" in warning
        assert "Config(connect_timeout=2" in warning
    else:  # the store's grouped writes go through its one-attempt client: a 2 s bound
        assert (2_000, []) == (store.unconditional_write_ms(), warnings)


def test_a_result_offloaded_to_s3_is_checked_again_before_the_request(
    idempotency_table: str,
    dynamodb_client: Any,
    s3_client: Any,
    bucket: str,
) -> None:
    """The S3 upload of a large result outlasts the lease and the key is taken over meanwhile:
    the grouped request is not sent, and the conditional completion finds the newer owner."""
    clock = ManualClock(START_MS)
    lease_ms = 600_000
    hook = Takeover(clock, idempotency_table, dynamodb_client, 0, 1)
    hook.lease_end_ms = START_MS + lease_ms
    hook.record_format = "native"

    def slow_upload(request: Any, **_: Any) -> None:
        if request.method == "PUT":
            clock.advance(lease_ms / 1000 + 2 * CLOCK_SKEW_TOLERANCE_MS / 1000)
            hook.take_over()

    s3_client.meta.events.register("before-send.s3", slow_upload)
    store = DynamoDBPersistenceLayer(
        idempotency_table,
        boto3_client=dynamodb_client,
        clock=clock,
        large_result_bucket=bucket,
        large_result_threshold_bytes=10,
        s3_client=s3_client,
    ).with_record_format("native")
    ran: list[int] = []

    @idempotent_sqs_handler(
        persistence_store=store, config=IdempotencyConfig(record_format="native")
    )
    def handler(record: SQSRecord, context: Any) -> str:
        ran.append(record.json_body["n"])
        return "x" * 100

    handler(_event(1), FakeLambdaContext(lease_ms, clock=clock))
    (record,) = _records(dynamodb_client, idempotency_table, "native")
    assert ([0], True) == (ran, hook.taken)
    assert (Status.IN_PROGRESS, "another-invocation") == (record.status, record.owner)


class Unprocessed:
    """Answers every BatchWriteItem with all its items unprocessed, each answer ``step_s`` on
    the clock, until `release` is set."""

    def __init__(self, clock: ManualClock, step_s: float) -> None:
        self.clock, self.step_s = clock, step_s
        self.release = threading.Event()
        self.answered = 0

    def before_send(self, request: Any, **_: Any) -> AWSResponse | None:
        if _operation(request) != "BatchWriteItem" or self.release.is_set():
            return None
        self.answered += 1
        self.clock.advance(self.step_s)
        return _answer(request, 200, {"UnprocessedItems": json.loads(request.body)["RequestItems"]})


@pytest.mark.parametrize("released_after", [6, None])
def test_unprocessed_completions_are_retried_within_the_lease_then_written_conditionally(
    idempotency_table: str, dynamodb_endpoint: str, released_after: int | None
) -> None:
    """Left unprocessed by six requests (over a second of pauses; the old code gave up after
    four and 350 ms), a completion is written by the seventh; left unprocessed for good, it is
    sent again while the lease allows (six requests, the clock moving 10 s each), then written
    as the conditional PutItem. The record the batch reports done is COMPLETED."""
    clock = ManualClock(START_MS)
    client = _client(dynamodb_endpoint, Config(connect_timeout=1, read_timeout=1))
    store = DynamoDBPersistenceLayer(idempotency_table, boto3_client=client, clock=clock)
    bound = store.unconditional_write_ms()
    assert bound is not None
    hook = Unprocessed(clock, step_s=10)
    client.meta.events.register("before-send.dynamodb", hook.before_send)

    def release_after(request: Any, **_: Any) -> None:
        if released_after is not None and hook.answered >= released_after:
            hook.release.set()

    client.meta.events.register("before-send.dynamodb", release_after)

    @idempotent_sqs_handler(persistence_store=store, max_concurrency=1)
    def handler(record: SQSRecord, context: Any) -> None:
        return None

    lease_ms = CLOCK_SKEW_TOLERANCE_MS + bound + 60_000  # room for six answers
    started = time.monotonic()
    answer = handler(_event(1), FakeLambdaContext(lease_ms, clock=clock))
    assert time.monotonic() - started > 0.35  # pauses of 50, 100, 200, 400 and 800 ms
    assert {"batchItemFailures": []} == answer
    assert 6 == hook.answered
    (record,) = _records(client, idempotency_table)
    assert Status.COMPLETED == record.status


def test_kafka_claims_ahead_of_a_failure_are_released_together(
    idempotency_table: str, dynamodb_client: Any, requests: Counter[str]
) -> None:
    """A partition whose first record fails: the nine claims taken ahead are deleted together,
    in one request, and a redelivery runs every record."""
    store = DynamoDBPersistenceLayer(idempotency_table, boto3_client=dynamodb_client)
    fail = {0}
    ran: list[int] = []

    @idempotent_kafka_handler(persistence_store=store)
    def handler(record: KafkaRecord, context: Any) -> None:
        if record.json_value["n"] in fail:
            raise RuntimeError("not yet")
        ran.append(record.json_value["n"])

    event = kafka_event(records=[KafkaRecordFields(value={"n": n}) for n in range(10)])
    answer = handler(event, FakeLambdaContext(600_000))
    assert 10 == len(answer["batchItemFailures"])
    writes = requests["DeleteItem"] + requests["BatchWriteItem"]
    assert writes <= 2  # the failed record's own release, and the nine others' together
    assert [] == _records(dynamodb_client, idempotency_table)
    fail.clear()
    assert {"batchItemFailures": []} == handler(event, FakeLambdaContext(600_000))
    assert list(range(10)) == ran


def test_decisions_count_the_dynamodb_requests_sent(
    idempotency_table: str, dynamodb_client: Any, requests: Counter[str]
) -> None:
    """StoreRequests adds up to the requests the client sent (completions grouped), while
    StoreCalls counts two store calls a record."""
    store = DynamoDBPersistenceLayer(idempotency_table, boto3_client=dynamodb_client)
    decisions: list[Decision] = []

    @idempotent_sqs_handler(
        persistence_store=store, config=IdempotencyConfig(decision_hook=decisions.append)
    )
    def handler(record: SQSRecord, context: Any) -> None:
        return None

    assert {"batchItemFailures": []} == handler(_event(40), FakeLambdaContext(600_000))
    assert 40 == len(decisions)
    assert 80 == sum(d.store_calls for d in decisions)
    assert sum(requests.values()) == sum(d.store_requests for d in decisions)
    assert requests["BatchWriteItem"] >= 1


def test_a_key_given_up_in_one_partition_runs_in_another_of_its_lane(
    idempotency_table: str, dynamodb_client: Any
) -> None:
    """Two partitions share a key: the first partition fails before its record of that key runs,
    so that record's claim is released before the other partition's record claims it, and runs."""
    store = DynamoDBPersistenceLayer(idempotency_table, boto3_client=dynamodb_client)
    ran: list[str] = []

    @idempotent_kafka_handler(
        persistence_store=store,
        config=IdempotencyConfig(event_key_jmespath="powertools_json(powertools_base64(value)).k"),
    )
    def handler(record: KafkaRecord, context: Any) -> None:
        value = record.json_value
        if value["k"] == "bad":
            raise RuntimeError("refused")
        ran.append(f"{record.partition}:{value['k']}")

    event = kafka_event(
        records=[
            KafkaRecordFields(partition=0, value={"k": "bad"}),
            KafkaRecordFields(partition=0, value={"k": "shared"}),
            KafkaRecordFields(partition=1, value={"k": "shared"}),
        ]
    )
    answer = handler(event, FakeLambdaContext(600_000))
    reported = sorted(f["itemIdentifier"]["partition"] for f in answer["batchItemFailures"])
    assert (["orders-0", "orders-0"], ["1:shared"]) == (reported, ran)


def test_an_adaptive_mode_client_never_groups_and_says_so(
    idempotency_table: str, dynamodb_endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Adaptive mode's rate limiter may hold a request back without limit: every completion is
    the conditional PutItem, and the handler warns once."""
    client = _client(dynamodb_endpoint, Config(retries={"mode": "adaptive"}))
    sent: Counter[str] = Counter()
    client.meta.events.register(
        "before-call.dynamodb", lambda model, **_: sent.update([model.name])
    )
    store = DynamoDBPersistenceLayer(idempotency_table, boto3_client=client)

    @idempotent_sqs_handler(persistence_store=store)
    def handler(record: SQSRecord, context: Any) -> None:
        return None

    with caplog.at_level(logging.WARNING, logger="idempotent_lambda.batch"):
        assert {"batchItemFailures": []} == handler(_event(5), FakeLambdaContext(600_000))
    assert {"PutItem": 10} == dict(sent)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "unbounded: adaptive retry mode" in warning
