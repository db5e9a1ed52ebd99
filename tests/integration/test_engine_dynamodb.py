"""The engine end to end against a DynamoDB-compatible server: round trips, fencing, outages."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest
from botocore.config import Config

from idempotent_lambda import (
    DynamoDBPersistenceLayer,
    IdempotencyAlreadyInProgressError,
    IdempotencyConfig,
    IdempotencyPersistenceLayerError,
    IdempotencyUnstorableResultError,
    IdempotencyValidationError,
    Status,
    idempotent,
)
from idempotent_lambda._claim import CLOCK_SKEW_TOLERANCE_MS
from idempotent_lambda.testing import FakeLambdaContext, ManualClock

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

EVENT = {"order_id": 7, "amount": 10}
NATIVE = IdempotencyConfig(record_format="native")  # compression, exact replay


@contextmanager
def round_trips(client: DynamoDBClient) -> Iterator[list[str]]:
    """Collect the DynamoDB operations ``client`` sends (every attempt) while the block runs."""
    sent: list[str] = []

    def count(request: Any, **kwargs: Any) -> None:
        sent.append(request.headers["X-Amz-Target"].decode().split(".")[-1])

    client.meta.events.register("before-send.dynamodb", count)
    try:
        yield sent
    finally:
        client.meta.events.unregister("before-send.dynamodb", count)


class Runs:
    """Counts body executions."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> int:
        self.count += 1
        return self.count


def make_handler(store: DynamoDBPersistenceLayer, config: IdempotencyConfig, runs: Runs) -> Any:
    """Return an idempotent handler that fails for ``{"fail": true}`` events."""

    @idempotent(persistence_store=store, config=config, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        run = runs()
        if event.get("fail"):
            raise RuntimeError("declined")
        return {"order_id": event["order_id"], "run": run, "empty": {}, "zero": 0}

    return handler


def test_round_trips_per_path(
    dynamodb_store: DynamoDBPersistenceLayer, dynamodb_client: DynamoDBClient
) -> None:
    """First call 2, replay 1, local-cache hit 0, handler raised 2, in progress 1."""
    runs = Runs()
    handler = make_handler(dynamodb_store, IdempotencyConfig(), runs)
    cached = make_handler(dynamodb_store, IdempotencyConfig(use_local_cache=True), Runs())
    context = FakeLambdaContext()

    with round_trips(dynamodb_client) as first:
        result = handler(EVENT, context)
    with round_trips(dynamodb_client) as replay:
        replayed = handler(EVENT, context)
    cached({"order_id": 8}, context)
    with round_trips(dynamodb_client) as cache_hit:
        cached({"order_id": 8}, context)
    with round_trips(dynamodb_client) as raised, pytest.raises(RuntimeError):
        handler({"order_id": 9, "fail": True}, context)

    assert ["PutItem", "PutItem"] == first
    assert ["PutItem"] == replay
    assert [] == cache_hit
    assert ["PutItem", "DeleteItem"] == raised
    assert result == replayed
    assert 2 == runs.count


def test_in_progress_and_validation_cost_one_round_trip(
    dynamodb_store: DynamoDBPersistenceLayer, dynamodb_client: DynamoDBClient
) -> None:
    """The failed claim returns the blocking record: one request, no extra read."""
    config = IdempotencyConfig(event_key_jmespath="order_id", payload_validation_jmespath="amount")
    outcomes: dict[str, list[str]] = {}

    @idempotent(persistence_store=dynamodb_store, config=config, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> str:
        if not event.get("inner"):
            with (
                round_trips(dynamodb_client) as sent,
                pytest.raises(IdempotencyAlreadyInProgressError),
            ):
                handler({**event, "inner": True}, context)
            outcomes["in-progress"] = sent
        return "ok"

    handler(EVENT, FakeLambdaContext())
    with round_trips(dynamodb_client) as invalid, pytest.raises(IdempotencyValidationError):
        handler({"order_id": 7, "amount": 11}, FakeLambdaContext())

    assert ["PutItem"] == outcomes["in-progress"]
    assert ["PutItem"] == invalid


def test_takeover_and_fencing_end_to_end(
    idempotency_table: str, dynamodb_client: DynamoDBClient
) -> None:
    """A passed lease is taken over; the old owner's completion leaves the new item alone."""
    clock = ManualClock()
    store = DynamoDBPersistenceLayer(idempotency_table, boto3_client=dynamodb_client, clock=clock)
    outcomes: list[str] = []
    config = IdempotencyConfig(decision_hook=lambda d: outcomes.append(d.outcome.value))

    @idempotent(persistence_store=store, config=config, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> str:
        if context.function_name == "slow":
            clock.advance(ms=5_000 + CLOCK_SKEW_TOLERANCE_MS + 1)
            assert "fast" == handler(event, FakeLambdaContext(10_000, clock=clock))
            return "slow"
        return "fast"

    own = handler(EVENT, FakeLambdaContext(5_000, clock=clock, function_name="slow"))
    replay = handler(EVENT, FakeLambdaContext(clock=clock))
    items = dynamodb_client.scan(TableName=idempotency_table)["Items"]

    assert "slow" == own
    assert "fast" == replay
    assert ["TAKEN_OVER", "LEASE_LOST", "REPLAYED"] == outcomes
    assert 1 == len(items)
    assert Status.COMPLETED == items[0]["status"]["S"]


def test_lease_within_the_skew_tolerance_is_not_taken_over(
    idempotency_table: str, dynamodb_client: DynamoDBClient
) -> None:
    """The server-side condition honours the tolerance: a lease ended 1000 ms ago is live."""
    clock = ManualClock()
    store = DynamoDBPersistenceLayer(idempotency_table, boto3_client=dynamodb_client, clock=clock)
    seen: list[str] = []

    @idempotent(persistence_store=store, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> str:
        if context.function_name == "slow":
            clock.advance(ms=5_000 + CLOCK_SKEW_TOLERANCE_MS)
            try:
                handler(event, FakeLambdaContext(clock=clock))
            except IdempotencyAlreadyInProgressError:
                seen.append("in progress")
        return "done"

    handler(EVENT, FakeLambdaContext(5_000, clock=clock, function_name="slow"))

    assert ["in progress"] == seen


def test_unreachable_store_raises_and_does_not_run(
    monkeypatch: pytest.MonkeyPatch, refused_port: int
) -> None:
    """Nothing listening at the endpoint: `IdempotencyPersistenceLayerError`, body not run."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", f"http://127.0.0.1:{refused_port}")
    store = DynamoDBPersistenceLayer(
        "IdempotencyTable",
        boto_config=Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=30),
    )
    runs = Runs()
    handler = make_handler(store, IdempotencyConfig(), runs)

    with pytest.raises(IdempotencyPersistenceLayerError) as raised:
        handler(EVENT, FakeLambdaContext())

    assert "EndpointConnectionError" == type(raised.value.__cause__).__name__
    assert 0 == runs.count


def test_missing_table_raises_and_does_not_run(dynamodb_client: DynamoDBClient) -> None:
    """A table that does not exist: `IdempotencyPersistenceLayerError`, body not run."""
    store = DynamoDBPersistenceLayer("no-such-table", boto3_client=dynamodb_client)
    runs = Runs()
    handler = make_handler(store, IdempotencyConfig(), runs)

    with pytest.raises(IdempotencyPersistenceLayerError) as raised:
        handler(EVENT, FakeLambdaContext())

    assert "ResourceNotFoundException" in str(raised.value)
    assert raised.value.__cause__ is not None
    assert 0 == runs.count


def test_table_deleted_after_the_claim_still_returns_the_result(
    dynamodb_store: DynamoDBPersistenceLayer,
    dynamodb_client: DynamoDBClient,
    idempotency_table: str,
) -> None:
    """The store failing on completion: the caller still gets the body's result."""
    outcomes: list[str] = []
    config = IdempotencyConfig(decision_hook=lambda d: outcomes.append(d.outcome.value))

    @idempotent(persistence_store=dynamodb_store, config=config, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> str:
        dynamodb_client.delete_table(TableName=idempotency_table)
        return "charged"

    assert "charged" == handler(EVENT, FakeLambdaContext())
    assert ["COMPLETE_FAILED"] == outcomes


@pytest.mark.parametrize(
    "result",
    [
        {"rows": [{"id": i, "name": "row", "price": "9.99"} for i in range(20_000)]},
        base64.b64encode(os.urandom(250_000)).decode(),
    ],
    ids=["compressible-1MB", "random-330KB"],
)
def test_large_results_are_stored_compressed_and_round_trip(
    dynamodb_store: DynamoDBPersistenceLayer,
    dynamodb_client: DynamoDBClient,
    idempotency_table: str,
    result: Any,
) -> None:
    """Results above the threshold are stored as zlib bytes (B) and replay exactly."""
    runs = Runs()

    @idempotent(persistence_store=dynamodb_store, config=NATIVE, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs()
        return result

    handler(EVENT, FakeLambdaContext())
    replay = handler(EVENT, FakeLambdaContext())
    item = dynamodb_client.scan(TableName=idempotency_table)["Items"][0]

    assert result == replay
    assert 1 == runs.count
    assert ["B"] == list(item["data"])


def test_result_too_large_even_compressed_is_unstorable(
    dynamodb_store: DynamoDBPersistenceLayer,
    dynamodb_client: DynamoDBClient,
    idempotency_table: str,
) -> None:
    """2 MB of random text: unstorable; the record is COMPLETED with a marker; retries raise."""
    runs = Runs()

    @idempotent(persistence_store=dynamodb_store, config=NATIVE, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs()
        return base64.b64encode(os.urandom(1_500_000)).decode()

    with pytest.raises(IdempotencyUnstorableResultError):
        handler(EVENT, FakeLambdaContext())
    with pytest.raises(IdempotencyUnstorableResultError):
        handler(EVENT, FakeLambdaContext())
    item = dynamodb_client.scan(TableName=idempotency_table)["Items"][0]

    assert Status.COMPLETED == item["status"]["S"]
    assert 1 == runs.count


def test_falsy_and_decimal_results_replay_exactly(
    dynamodb_store: DynamoDBPersistenceLayer,
) -> None:
    """``{}``, ``0``, ``False``, ``""``, ``None`` and Decimal survive a trip through DynamoDB."""
    from decimal import Decimal

    values: list[Any] = [{}, [], 0, False, "", None, Decimal("1.10"), {"$x": (1, b"\x00")}]

    @idempotent(persistence_store=dynamodb_store, config=NATIVE, key_prefix="values")
    def handler(event: dict[str, Any], context: Any) -> Any:
        return values[event["index"]]

    replays = []
    for index in range(len(values)):
        handler({"index": index}, FakeLambdaContext())
        replays.append(handler({"index": index}, FakeLambdaContext()))

    assert values == replays
    assert [type(v) for v in values] == [type(r) for r in replays]
