"""One contract suite for every store: in-memory, DynamoDB (also in composite-key mode), Redis.

DynamoDB runs on two engines written independently: moto, and dynalite (tests/integration/
_dynalite.py). dynalite sends no item with a failed condition, so there a blocked claim reads its
blocker with a GetItem; it has no transactions and no TTL, which this suite does not use.

Times are explicit arguments, far in the future (so no server-side TTL can interfere), and the
boundaries are tested exactly: a lease ending *at* the cutoff has not passed, and an expiration
(epoch seconds) equal to ``now_ms // 1000`` has not passed either.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import replace
from typing import Any

import pytest

from idempotent_lambda.exceptions import IdempotencyUnstorableResultError
from idempotent_lambda.persistence.base import (
    DEFAULT_COMPRESSION_THRESHOLD_BYTES,
    MAX_STORED_DATA_BYTES,
    BatchReadStore,
    ClaimOutcome,
    PersistenceStore,
)
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.persistence.in_memory import InMemoryPersistenceLayer
from idempotent_lambda.persistence.protocol import store_for_format
from idempotent_lambda.record import IdempotencyRecord, Status

NOW_MS = 4_000_000_000_500
NOW_S = NOW_MS // 1000
LEASE_MS = NOW_MS + 30_000
EXPIRY_S = NOW_S + 3600
KEY = "test.handler#5d41402abc4b2a76b9719d911017c592"


STORES = ["in-memory", "dynamodb", "dynamodb-composite", "dynalite", "dynalite-composite", "redis"]
#: The DynamoDB-compatible servers: each one's client fixture and table factory fixture.
DYNAMODB_ENGINES = {
    "dynamodb": ("dynamodb_client", "make_table"),
    "dynalite": ("dynalite_client", "make_dynalite_table"),
}


def make_store(request: pytest.FixtureRequest, **options: Any) -> PersistenceStore:
    """Build the store ``request.param`` names, empty, with the constructor ``options``."""
    if request.param == "in-memory":
        return InMemoryPersistenceLayer(**options)
    if request.param == "redis":
        from idempotent_lambda.persistence.redis import RedisCachePersistenceLayer

        return RedisCachePersistenceLayer(client=request.getfixturevalue("redis_client"), **options)
    engine, _, layout = request.param.partition("-")
    client_fixture, tables_fixture = DYNAMODB_ENGINES[engine]
    client = request.getfixturevalue(client_fixture)
    make_table = request.getfixturevalue(tables_fixture)
    if layout != "composite":
        return DynamoDBPersistenceLayer(make_table(), boto3_client=client, **options)
    table = make_table(sort_key_attr="sk")
    return DynamoDBPersistenceLayer(
        table,
        sort_key_attr="sk",
        static_pk_value="idempotency#contract",
        boto3_client=client,
        **options,
    )


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> PersistenceStore:
    """Return each store implementation in turn, empty."""
    return make_store(request)


@pytest.fixture(params=STORES)
def uncompressing_store(request: pytest.FixtureRequest) -> PersistenceStore:
    """Return each store in turn, told to compress nothing under 10 MB."""
    return make_store(request, compression_threshold_bytes=10**7)


def in_progress(
    owner: str,
    *,
    lease_ms: int | None = LEASE_MS,
    expiry_s: int = EXPIRY_S,
    payload_hash: str | None = "hash-1",
) -> IdempotencyRecord:
    """Build an IN_PROGRESS record for KEY."""
    return IdempotencyRecord(
        idempotency_key=KEY,
        status=Status.IN_PROGRESS,
        expiry_timestamp=expiry_s,
        in_progress_expiry_timestamp=lease_ms,
        payload_hash=payload_hash,
        owner=owner,
    )


def completed(claimed: IdempotencyRecord, data: str | None = '{"ok":true}') -> IdempotencyRecord:
    """Build the COMPLETED record that follows ``claimed``."""
    return replace(
        claimed, status=Status.COMPLETED, in_progress_expiry_timestamp=None, response_data=data
    )


def claim(
    store: PersistenceStore,
    record: IdempotencyRecord,
    now_ms: int = NOW_MS,
    cutoff_ms: int = NOW_MS,
) -> ClaimOutcome:
    """Claim ``record`` at ``now_ms`` with lease cutoff ``cutoff_ms``."""
    return store.claim(record, now_ms=now_ms, lease_cutoff_ms=cutoff_ms)


def test_claim_on_empty_store(store: PersistenceStore) -> None:
    """A claim on an empty store succeeds and reports no previous record."""
    record = in_progress("owner-a")
    assert ClaimOutcome(claimed=True, previous=None) == claim(store, record)
    assert record == store.get(KEY)


def test_claim_blocked_by_live_in_progress_returns_blocking_record(
    store: PersistenceStore,
) -> None:
    """A claim against a live lease fails and returns the holder with owner, lease and hash."""
    first = in_progress("owner-a")
    claim(store, first)
    outcome = claim(store, in_progress("owner-b", payload_hash="hash-2"), cutoff_ms=NOW_MS + 1)
    assert ClaimOutcome(claimed=False, previous=first) == outcome
    assert outcome.previous is not None
    expected = ("owner-a", LEASE_MS, "hash-1")
    assert expected == (
        outcome.previous.owner,
        outcome.previous.in_progress_expiry_timestamp,
        outcome.previous.payload_hash,
    )
    assert first == store.get(KEY)


def test_lease_ending_at_cutoff_has_not_passed(store: PersistenceStore) -> None:
    """A lease that ends exactly at the cutoff still blocks the claim."""
    first = in_progress("owner-a")
    claim(store, first)
    assert ClaimOutcome(claimed=False, previous=first) == claim(
        store, in_progress("owner-b"), cutoff_ms=LEASE_MS
    )


def test_claim_takes_over_after_lease_passed_and_returns_previous(store: PersistenceStore) -> None:
    """Once the lease ended before the cutoff, a claim takes over and returns the old record."""
    first = in_progress("owner-a")
    claim(store, first)
    second = in_progress("owner-b", lease_ms=LEASE_MS + 60_000)
    assert ClaimOutcome(claimed=True, previous=first) == claim(
        store, second, cutoff_ms=LEASE_MS + 1
    )
    assert second == store.get(KEY)


def test_completed_record_blocks_until_its_expiration_second_has_passed(
    store: PersistenceStore,
) -> None:
    """A COMPLETED record blocks while ``now_ms // 1000`` is at most its expiration."""
    first = in_progress("owner-a")
    claim(store, first)
    done = completed(first)
    assert store.complete(done)
    last_live_ms = EXPIRY_S * 1000 + 999
    outcome = claim(store, in_progress("owner-b"), now_ms=last_live_ms, cutoff_ms=last_live_ms)
    assert ClaimOutcome(claimed=False, previous=done) == outcome


def test_claim_over_expired_completed_record_returns_it(store: PersistenceStore) -> None:
    """A claim in the second after the expiration replaces the COMPLETED record."""
    first = in_progress("owner-a")
    claim(store, first)
    done = completed(first)
    store.complete(done)
    later_ms = (EXPIRY_S + 1) * 1000
    second = in_progress("owner-b", lease_ms=later_ms + 30_000, expiry_s=EXPIRY_S + 7200)
    assert ClaimOutcome(claimed=True, previous=done) == claim(store, second, later_ms, later_ms)
    assert second == store.get(KEY)


def test_in_progress_without_lease_is_live_until_expiration(store: PersistenceStore) -> None:
    """An IN_PROGRESS record with no lease end blocks any cutoff until its expiration passes."""
    first = in_progress("owner-a", lease_ms=None)
    claim(store, first)
    far_cutoff = NOW_MS + 10**9
    last_live_ms = EXPIRY_S * 1000 + 999
    assert ClaimOutcome(claimed=False, previous=first) == claim(
        store, in_progress("owner-b"), last_live_ms, far_cutoff
    )
    second = in_progress("owner-c", expiry_s=EXPIRY_S + 10)
    assert ClaimOutcome(claimed=True, previous=first) == claim(
        store, second, (EXPIRY_S + 1) * 1000, far_cutoff
    )


def test_complete_by_owner_stores_completed_record(store: PersistenceStore) -> None:
    """The owner's completion replaces its IN_PROGRESS record."""
    first = in_progress("owner-a")
    claim(store, first)
    done = completed(first)
    assert store.complete(done)
    assert done == store.get(KEY)


def test_complete_by_stale_owner_fails_and_leaves_newer_record(store: PersistenceStore) -> None:
    """After a takeover, the old owner's completion fails and the new record stays."""
    first = in_progress("owner-a")
    claim(store, first)
    second = in_progress("owner-b", lease_ms=LEASE_MS + 60_000)
    claim(store, second, cutoff_ms=LEASE_MS + 1)
    assert not store.complete(completed(first))
    assert second == store.get(KEY)


def test_complete_without_record_fails(store: PersistenceStore) -> None:
    """Completing a key nobody claimed fails and writes nothing."""
    assert not store.complete(completed(in_progress("owner-a")))
    assert store.get(KEY) is None


def test_complete_twice_fails_the_second_time(store: PersistenceStore) -> None:
    """A COMPLETED record is not IN_PROGRESS any more, so it cannot be completed again."""
    first = in_progress("owner-a")
    claim(store, first)
    done = completed(first)
    store.complete(done)
    assert not store.complete(completed(first, data='"other"'))
    assert done == store.get(KEY)


def test_release_by_owner_deletes_record(store: PersistenceStore) -> None:
    """The owner's release deletes the record, so the next claim succeeds."""
    claim(store, in_progress("owner-a"))
    assert store.release(KEY, "owner-a")
    assert store.get(KEY) is None
    assert ClaimOutcome(claimed=True, previous=None) == claim(store, in_progress("owner-b"))


def test_release_by_stale_owner_fails_and_leaves_newer_record(store: PersistenceStore) -> None:
    """After a takeover, the old owner's release fails and the new record stays."""
    claim(store, in_progress("owner-a"))
    second = in_progress("owner-b", lease_ms=LEASE_MS + 60_000)
    claim(store, second, cutoff_ms=LEASE_MS + 1)
    assert not store.release(KEY, "owner-a")
    assert second == store.get(KEY)


def test_release_of_completed_record_fails(store: PersistenceStore) -> None:
    """A COMPLETED record is never released, even by its owner."""
    first = in_progress("owner-a")
    claim(store, first)
    done = completed(first)
    store.complete(done)
    assert not store.release(KEY, "owner-a")
    assert done == store.get(KEY)


def test_release_of_missing_record_fails(store: PersistenceStore) -> None:
    """Releasing a key with no record reports failure."""
    assert not store.release(KEY, "owner-a")


@pytest.mark.parametrize("record_format", ["native", "powertools"])
def test_release_of_a_never_written_key_leaves_no_trace(
    store: PersistenceStore, record_format: str
) -> None:
    """A fenced release of a claim that never reached the store is harmless: no error, no record,
    and the next claim finds the key free (the undo of a claim whose reply was lost)."""
    store = store_for_format(store, record_format)
    assert (False, None) == (store.release(KEY, "owner-a"), store.get(KEY))
    assert ClaimOutcome(claimed=True, previous=None) == claim(store, in_progress("owner-b"))


@pytest.mark.parametrize("record_format", ["native", "powertools"])
def test_release_with_another_owner_leaves_the_live_record(
    store: PersistenceStore, record_format: str
) -> None:
    """A release fenced on an owner that does not hold the live claim fails and changes nothing."""
    store = store_for_format(store, record_format)
    holder = in_progress("owner-a")
    claim(store, holder)
    assert not store.release(KEY, "owner-b")
    assert holder == store.get(KEY)
    assert ClaimOutcome(claimed=False, previous=holder) == claim(store, in_progress("owner-c"))


def test_get_missing_returns_none(store: PersistenceStore) -> None:
    """Reading a key with no record returns None."""
    assert store.get(KEY) is None


def test_every_field_round_trips(store: PersistenceStore) -> None:
    """Every field of a claimed and then a completed record reads back unchanged."""
    first = IdempotencyRecord(
        idempotency_key=KEY,
        status=Status.IN_PROGRESS,
        expiry_timestamp=EXPIRY_S,
        in_progress_expiry_timestamp=LEASE_MS,
        response_data='{"partial":[1,2,{"a":null}]}',
        payload_hash="9e107d9d372bb6826bd81d3542a419d6",
        owner="0b3f6c1e-6f65-4d0e-9f5c-3c2a4a0f4e11",
    )
    claim(store, first)
    assert first == store.get(KEY)
    done = replace(first, status=Status.COMPLETED, response_data='{"héllo":"wörld ✓ 日本"}')
    assert store.complete(done)
    assert done == store.get(KEY)


def test_record_with_only_required_fields_round_trips(store: PersistenceStore) -> None:
    """A record with every optional field unset reads back with them unset."""
    bare = IdempotencyRecord(idempotency_key=KEY, status=Status.IN_PROGRESS)
    claim(store, bare)
    assert bare == store.get(KEY)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param("", id="empty"),
        pytest.param('{"statusCode":200,"body":"ok"}', id="small"),
        pytest.param("x" * DEFAULT_COMPRESSION_THRESHOLD_BYTES, id="at-threshold"),
        pytest.param(
            json.dumps([{"item": i, "name": f"name-{i}"} for i in range(20_000)]),
            id="large-compressible",
        ),
        pytest.param(base64.b64encode(os.urandom(200_000)).decode(), id="large-random"),
    ],
)
def test_result_data_round_trips(store: PersistenceStore, data: str) -> None:
    """Small results and large (compressed) results read back exactly."""
    first = in_progress("owner-a")
    claim(store, first)
    assert store.complete(completed(first, data))
    stored = store.get(KEY)
    assert stored is not None
    assert data == stored.response_data


def test_too_large_result_raises_and_keeps_record_owned(store: PersistenceStore) -> None:
    """An incompressible 2 MB result is unstorable, and the claim stays IN_PROGRESS and owned."""
    first = in_progress("owner-a")
    claim(store, first)
    huge = base64.b64encode(os.urandom(1_500_000)).decode()
    with pytest.raises(IdempotencyUnstorableResultError):
        store.complete(completed(first, huge))
    assert first == store.get(KEY)
    marker = completed(first, '{"unstorable":true}')
    assert store.complete(marker)
    assert marker == store.get(KEY)


def test_the_item_limit_holds_whatever_the_compression_threshold(
    uncompressing_store: PersistenceStore,
) -> None:
    """Every store applies one item limit: a result too large for an item as text is compressed
    whatever the threshold, and one still too large compressed is refused, by every store."""
    store = uncompressing_store
    first = in_progress("owner-a")
    claim(store, first)
    compressible = json.dumps([{"item": i, "name": f"name-{i}"} for i in range(25_000)])
    incompressible = base64.b64encode(os.urandom(450_000)).decode()
    assert len(compressible) > 600_000
    assert len(incompressible) >= 600_000

    with pytest.raises(IdempotencyUnstorableResultError):
        store.complete(completed(first, incompressible))
    assert first == store.get(KEY)
    assert store.complete(completed(first, compressible))
    stored = store.get(KEY)
    assert stored is not None
    assert compressible == stored.response_data


def test_a_result_at_the_item_limit_fits_every_store(uncompressing_store: PersistenceStore) -> None:
    """A result of exactly the limit, under the threshold, fits every store uncompressed."""
    store = uncompressing_store
    first = in_progress("owner-a")
    claim(store, first)
    at_limit = base64.b64encode(os.urandom(MAX_STORED_DATA_BYTES))[:MAX_STORED_DATA_BYTES].decode()

    assert store.complete(completed(first, at_limit))
    stored = store.get(KEY)
    assert stored is not None
    assert at_limit == stored.response_data


def batch_reader(store: PersistenceStore) -> BatchReadStore:
    """Return ``store`` as a `BatchReadStore` (every store here is one)."""
    assert isinstance(store, BatchReadStore)
    return store


def test_get_many_returns_only_the_records_that_exist(store: PersistenceStore) -> None:
    """A batch read returns each stored record by key, as `get` does, and skips the absent."""
    done = completed(in_progress("owner-a"), data="x" * (DEFAULT_COMPRESSION_THRESHOLD_BYTES + 9))
    claim(store, in_progress("owner-a"))
    assert store.complete(done)
    live = replace(in_progress("owner-b"), idempotency_key=KEY + "-live")
    claim(store, live)
    found = batch_reader(store).get_many([KEY + "-absent", KEY, live.idempotency_key, KEY])
    assert {KEY: done, live.idempotency_key: live} == found
    assert {} == batch_reader(store).get_many([])


def test_get_many_reads_more_keys_than_one_request_holds(store: PersistenceStore) -> None:
    """250 keys (three DynamoDB requests of at most 100) come back complete."""
    keys = [f"{KEY}-{n}" for n in range(250)]
    for key in keys[::2]:
        claim(store, replace(in_progress("owner-a"), idempotency_key=key))
    found = batch_reader(store).get_many(keys)
    assert set(keys[::2]) == set(found)
    assert all(found[key].idempotency_key == key for key in found)
