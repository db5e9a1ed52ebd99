"""The DynamoDB store on dynalite, which sends no item back with a failed condition.

The contract suite runs on dynalite too (test_store_contract.py); these tests hold what differs:
how a blocked claim learns its blocker, and the engine end to end. dynalite has neither
``TransactWriteItems`` nor TTL, so transactions and TTL are tested on moto only.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from idempotent_lambda import IdempotencyAlreadyInProgressError, idempotent
from idempotent_lambda.exceptions import (
    IdempotencyPersistenceLayerError,
    IdempotencyUnstorableResultError,
)
from idempotent_lambda.persistence.base import MAX_STORED_DATA_BYTES, ClaimOutcome
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.persistence.dynamodb._operator import create_idempotency_table
from idempotent_lambda.record import Status
from tests.integration.test_store_contract import KEY, LEASE_MS, NOW_MS, in_progress

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient


@pytest.fixture
def store(
    make_dynalite_table: Callable[..., str], dynalite_client: DynamoDBClient
) -> DynamoDBPersistenceLayer:
    """Return a store on a fresh dynalite table."""
    return DynamoDBPersistenceLayer(make_dynalite_table(), boto3_client=dynalite_client)


@pytest.fixture
def other_store(
    store: DynamoDBPersistenceLayer, dynalite_endpoint: str
) -> DynamoDBPersistenceLayer:
    """Return a second store on the same table, with a client of its own."""
    client = boto3.session.Session().client(
        "dynamodb", endpoint_url=dynalite_endpoint, region_name="us-east-1"
    )
    return DynamoDBPersistenceLayer(store.table_name, boto3_client=client)


@contextmanager
def requests_sent(client: DynamoDBClient) -> Iterator[list[str]]:
    """Collect the operation of every request ``client`` sends meanwhile."""
    sent: list[str] = []

    def record(event_name: str, **_: Any) -> None:
        sent.append(event_name.rpartition(".")[2])

    client.meta.events.register("before-send.dynamodb", record)
    try:
        yield sent
    finally:
        client.meta.events.unregister("before-send.dynamodb", record)


def test_a_blocked_claim_learns_its_blocker_with_one_read(
    store: DynamoDBPersistenceLayer,
) -> None:
    """No item comes with the failed condition: one GetItem reads the blocking record."""
    first = in_progress("owner-a")
    assert store.claim(first, now_ms=NOW_MS, lease_cutoff_ms=NOW_MS).claimed

    with requests_sent(store.client) as sent:
        outcome = store.claim(in_progress("owner-b"), now_ms=NOW_MS, lease_cutoff_ms=NOW_MS)

    assert ClaimOutcome(claimed=False, previous=first) == outcome
    assert ["PutItem", "GetItem"] == sent


def test_a_blocker_released_before_the_read_leaves_the_key_to_the_claim(
    store: DynamoDBPersistenceLayer, other_store: DynamoDBPersistenceLayer
) -> None:
    """The holder releases between the failed condition and the read: the claim is written."""
    assert other_store.claim(in_progress("owner-a"), now_ms=NOW_MS, lease_cutoff_ms=NOW_MS).claimed
    released: list[bool] = []

    def release_first(**_: Any) -> None:
        if not released:
            released.append(other_store.release(KEY, "owner-a"))

    store.client.meta.events.register("before-call.dynamodb.GetItem", release_first)
    second = in_progress("owner-b", lease_ms=LEASE_MS + 1)

    outcome = store.claim(second, now_ms=NOW_MS, lease_cutoff_ms=NOW_MS)

    assert ([True], ClaimOutcome(claimed=True, previous=None)) == (released, outcome)
    assert second == store.get(KEY)


def test_the_engine_runs_once_replays_and_refuses_a_held_key(
    store: DynamoDBPersistenceLayer,
) -> None:
    """A decorated handler runs once, then replays; the same request meanwhile is refused."""
    runs: list[int] = []

    @idempotent(persistence_store=store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(1)
        with pytest.raises(IdempotencyAlreadyInProgressError):
            handler(event, None)  # while this invocation holds the key
        return {"n": event["n"]}

    assert [{"n": 1}, {"n": 1}] == [handler({"n": 1}, None), handler({"n": 1}, None)]
    assert [1] == runs


def test_racing_claims_have_one_winner_whom_every_loser_reads(
    store: DynamoDBPersistenceLayer, dynalite_endpoint: str
) -> None:
    """Eight claims at once on one key: one is written, the seven others read its record."""
    barrier = threading.Barrier(8)
    outcomes: dict[str, ClaimOutcome] = {}

    def race(owner: str) -> None:
        client = boto3.session.Session().client(
            "dynamodb", endpoint_url=dynalite_endpoint, region_name="us-east-1"
        )
        racer = DynamoDBPersistenceLayer(store.table_name, boto3_client=client)
        barrier.wait()
        outcomes[owner] = racer.claim(in_progress(owner), now_ms=NOW_MS, lease_cutoff_ms=NOW_MS)

    threads = [threading.Thread(target=race, args=(f"owner-{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    winners = [owner for owner, outcome in outcomes.items() if outcome.claimed]
    assert 1 == len(winners)
    seen = {o.previous.owner for o in outcomes.values() if not o.claimed and o.previous}
    assert ({winners[0]}, 8) == (seen, len(outcomes))


def test_an_item_too_large_for_dynalite_is_an_unstorable_result(
    make_dynalite_table: Callable[..., str], dynalite_client: DynamoDBClient
) -> None:
    """dynalite's own item-size check is read as DynamoDB's: the result cannot be stored."""
    store = DynamoDBPersistenceLayer(
        make_dynalite_table(), boto3_client=dynalite_client, compression_threshold_bytes=10**7
    )
    claimed = in_progress("owner-a", payload_hash="h" * 10_000)
    store.claim(claimed, now_ms=NOW_MS, lease_cutoff_ms=NOW_MS)
    too_big = dataclasses.replace(
        claimed, status=Status.COMPLETED, response_data="x" * MAX_STORED_DATA_BYTES
    )

    with pytest.raises(IdempotencyUnstorableResultError):
        store.complete(too_big)
    assert claimed == store.get(KEY)


def test_a_table_without_ttl_is_created_and_the_missing_ttl_logged(
    dynalite_client: DynamoDBClient, caplog: pytest.LogCaptureFixture
) -> None:
    """dynalite has no TTL: the table is created all the same, and the refusal is logged."""
    name = f"idempotency-{uuid.uuid4().hex[:12]}"
    with caplog.at_level(logging.WARNING):
        create_idempotency_table(dynalite_client, table_name=name)
    try:
        status = dynalite_client.describe_table(TableName=name)["Table"].get("TableStatus")
        assert ("ACTIVE", True) == (status, "UnknownOperationException" in caplog.text)
    finally:
        dynalite_client.delete_table(TableName=name)


def test_without_transactions_a_transactional_completion_is_a_store_error(
    store: DynamoDBPersistenceLayer,
) -> None:
    """dynalite has no TransactWriteItems: `complete_with` fails as the store, the claim stays."""
    claimed = in_progress("owner-a")
    store.claim(claimed, now_ms=NOW_MS, lease_cutoff_ms=NOW_MS)
    done = dataclasses.replace(claimed, status=Status.COMPLETED, response_data="1")
    write = {"Put": {"TableName": store.table_name, "Item": {"id": {"S": "business#1"}}}}

    with pytest.raises(IdempotencyPersistenceLayerError, match="UnknownOperationException"):
        store.complete_with(done, [write])
    assert claimed == store.get(KEY)
