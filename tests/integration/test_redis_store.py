"""The Redis store against a real redis-server: round trips, races, TTLs, clients and errors.

The contract every store shares is in test_store_contract; Powertools' documented Redis and
Valkey patterns are in test_redis_examples.
"""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.cluster

from idempotent_lambda import (
    IdempotencyAlreadyInProgressError,
    IdempotencyConfig,
    IdempotencyConfigError,
    IdempotencyPersistenceLayerError,
    idempotent,
)
from idempotent_lambda.exceptions import IdempotencyCorruptRecordError
from idempotent_lambda.persistence.redis import RedisCachePersistenceLayer
from idempotent_lambda.record import IdempotencyRecord, Status
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests.integration import _redis_worker
from tests.integration._redis_server import requests_seen_by_server

PROCESSES = 4
NATIVE = IdempotencyConfig(record_format="native")  # compression, exact replay
GRACE_MS = 300_000


def test_first_call_costs_two_round_trips_and_a_replay_one(
    redis_port: int, redis_store: RedisCachePersistenceLayer
) -> None:
    """Counted by the server: claim + complete on the first call, one claim on the replay."""
    executions: list[int] = []

    @idempotent(persistence_store=redis_store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        executions.append(1)
        return {"order": event["order"], "token": uuid.uuid4().hex}

    with requests_seen_by_server(redis_port) as first_call:
        first = handler({"order": 7}, FakeLambdaContext())
    with requests_seen_by_server(redis_port) as replay_call:
        replay = handler({"order": 7}, FakeLambdaContext())

    assert first == replay
    assert [1] == executions
    assert ["EVAL", "EVAL"] == first_call
    assert ["EVAL"] == replay_call


def test_failing_body_costs_a_claim_and_a_release(
    redis_port: int, redis_client: redis.Redis, redis_store: RedisCachePersistenceLayer
) -> None:
    """A body that raises: claim, then a release that deletes the record, so a retry runs."""

    @idempotent(persistence_store=redis_store)
    def handler(event: dict[str, Any], context: Any) -> None:
        raise RuntimeError("boom")

    with requests_seen_by_server(redis_port) as failed_call, pytest.raises(RuntimeError):
        handler({"order": 8}, FakeLambdaContext())

    assert ["EVAL", "EVAL"] == failed_call
    assert [] == redis_client.keys("*")


def test_processes_on_one_key_run_the_body_once(redis_port: int, tmp_path: Path) -> None:
    """4 spawned processes on one key: one execution; the others replay it or are refused."""
    executions_file = tmp_path / "executions"
    redis.Redis(host="127.0.0.1", port=redis_port).flushdb()
    context = multiprocessing.get_context("spawn")
    ready, start, results = context.Semaphore(0), context.Event(), context.Queue()
    processes = [
        context.Process(
            target=_redis_worker.invoke,
            args=(redis_port, str(executions_file), ready, start, results),
        )
        for _ in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    for _ in processes:
        assert ready.acquire(timeout=120)
    start.set()
    outcomes = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(30)

    assert [0] * PROCESSES == [process.exitcode for process in processes]
    assert 1 == len(executions_file.read_text().splitlines())
    results_seen = [value for kind, value in outcomes if kind == "result"]
    errors = {value for kind, value in outcomes if kind == "error"}
    assert results_seen
    assert all(value == results_seen[0] for value in results_seen)
    assert errors <= {IdempotencyAlreadyInProgressError.__name__}


def test_keys_get_a_redis_ttl_of_the_record_life_plus_grace(
    redis_client: redis.Redis, redis_store: RedisCachePersistenceLayer
) -> None:
    """While in progress and once completed, the key expires in Redis after the record does."""
    ttls: list[int] = []
    config = IdempotencyConfig(expires_after_seconds=120)

    @idempotent(persistence_store=redis_store, config=config, key_prefix="ttl")
    def handler(event: dict[str, Any], context: Any) -> str:
        ttls.append(redis_client.pttl(redis_client.keys("ttl#*")[0]))
        return "done"

    handler({"n": 1}, FakeLambdaContext())
    ttls.append(redis_client.pttl(redis_client.keys("ttl#*")[0]))

    lowest, highest = 120_000 + GRACE_MS - 30_000, 121_000 + GRACE_MS  # 30 s for a slow machine
    assert [True, True] == [lowest <= ttl <= highest for ttl in ttls]


def test_expiry_is_decided_by_the_store_clock_while_redis_still_holds_the_key(
    redis_client: redis.Redis,
) -> None:
    """Past the record's expiry on the store's clock, the call runs again: Redis' TTL is a GC."""
    clock = ManualClock()
    store = RedisCachePersistenceLayer(client=redis_client, clock=clock)
    runs: list[int] = []

    @idempotent(persistence_store=store, config=IdempotencyConfig(expires_after_seconds=60))
    def handler(event: dict[str, Any], context: Any) -> int:
        runs.append(1)
        return len(runs)

    assert 1 == handler({"n": 1}, FakeLambdaContext(clock=clock))
    assert 1 == handler({"n": 1}, FakeLambdaContext(clock=clock))
    clock.advance(61)
    assert 1 == len(redis_client.keys("*"))
    assert 2 == handler({"n": 1}, FakeLambdaContext(clock=clock))


@pytest.mark.parametrize("protocol", [2, 3])
def test_client_decoding_responses_still_replays_compressed_results(
    redis_client: redis.Redis, redis_port: int, protocol: int
) -> None:
    """A ``decode_responses=True`` client (as in Powertools' examples) reads zlib data intact."""
    client = redis.Redis(
        host="127.0.0.1", port=redis_port, decode_responses=True, protocol=protocol
    )
    store = RedisCachePersistenceLayer(client=client)
    big = [{"line": i, "text": "é ✓ " * 5} for i in range(2_000)]

    @idempotent(persistence_store=store, config=NATIVE, key_prefix="decoded")
    def handler(event: dict[str, Any], context: Any) -> list[dict[str, Any]]:
        return big

    assert big == handler({"n": 1}, FakeLambdaContext())
    assert big == handler({"n": 1}, FakeLambdaContext())
    key = client.keys("decoded#*")[0]
    assert "zlib" == client.hget(key, "data_encoding")


def test_valkey_glide_sync_client_drives_the_store(redis_port: int) -> None:
    """valkey-glide's synchronous client: fenced writes, replay and compressed data work."""
    glide_sync = pytest.importorskip("glide_sync", reason="valkey-glide-sync is not installed")
    config = glide_sync.GlideClientConfiguration(
        addresses=[glide_sync.NodeAddress(host="127.0.0.1", port=redis_port)],
        request_timeout=30_000,  # glide's default, 250 ms, is too tight for a loaded machine
    )
    client = glide_sync.GlideClient.create(config)
    try:
        client.custom_command(["FLUSHDB"])
        store = RedisCachePersistenceLayer(client=client)
        key = "glide#1"
        first = IdempotencyRecord(
            key, Status.IN_PROGRESS, expiry_timestamp=4_000_000_000, owner="a"
        )
        assert store.claim(first, now_ms=0, lease_cutoff_ms=0).claimed
        assert not store.claim(first, now_ms=0, lease_cutoff_ms=0).claimed
        done = IdempotencyRecord(
            key, Status.COMPLETED, expiry_timestamp=4_000_000_000, response_data="x" * 50_000
        )
        assert not store.complete(done)  # no owner: fenced out
        owned = IdempotencyRecord(
            key, Status.COMPLETED, 4_000_000_000, response_data="x" * 50_000, owner="a"
        )
        assert store.complete(owned)
        assert owned == store.get(key)
        assert not store.release(key, "a")
    finally:
        client.close()


def test_asyncio_clients_bound_to_another_loop_are_refused() -> None:
    """An asyncio redis-py client, or any coroutine but glide's ``create``, is a config error."""

    async def not_a_client() -> None: ...

    with pytest.raises(IdempotencyConfigError, match="asyncio client"):
        RedisCachePersistenceLayer(client=redis.asyncio.Redis())
    with pytest.raises(IdempotencyConfigError, match="not a client"):
        RedisCachePersistenceLayer(client=not_a_client())  # type: ignore[arg-type]


def test_client_that_cannot_run_scripts_is_refused() -> None:
    """A get/set/delete stub cannot give an atomic claim: a config error, not a silent race."""

    class GetSetDelete:
        def get(self, name: str) -> None: ...
        def set(self, name: str, value: str) -> None: ...
        def delete(self, name: str) -> None: ...

    with pytest.raises(IdempotencyConfigError, match="cannot run Lua scripts"):
        RedisCachePersistenceLayer(client=GetSetDelete())  # type: ignore[arg-type]


def test_unknown_mode_is_refused() -> None:
    """Only standalone and cluster exist."""
    with pytest.raises(IdempotencyConfigError, match="mode"):
        RedisCachePersistenceLayer(host="localhost", mode="sentinel")  # type: ignore[arg-type]


def test_connection_options_reach_the_right_database(redis_port: int) -> None:
    """host/port/db_index and url build a client lazily, on the chosen database."""
    admin = redis.Redis(host="127.0.0.1", port=redis_port, db=3)
    admin.flushdb()
    by_options = RedisCachePersistenceLayer(
        host="127.0.0.1", port=redis_port, db_index=3, ssl=False
    )
    by_url = RedisCachePersistenceLayer(url=f"redis://127.0.0.1:{redis_port}/3")
    record = IdempotencyRecord("db#1", Status.IN_PROGRESS, owner="o")

    assert by_options.claim(record, now_ms=0, lease_cutoff_ms=0).claimed
    assert record == by_url.get("db#1")
    assert [b"db#1"] == admin.keys("*")


def test_cluster_mode_builds_a_cluster_client_that_runs_the_scripts(
    redis_cluster_port: int,
) -> None:
    """``mode="cluster"`` talks to a Redis Cluster; each script is routed by its one key."""
    store = RedisCachePersistenceLayer(
        host="127.0.0.1", port=redis_cluster_port, mode="cluster", ssl=False
    )
    key = f"cluster#{uuid.uuid4().hex}"
    claimed = IdempotencyRecord(key, Status.IN_PROGRESS, 4_000_000_000, owner="a")
    done = IdempotencyRecord(key, Status.COMPLETED, 4_000_000_000, response_data="[1]", owner="a")

    assert store.claim(claimed, now_ms=0, lease_cutoff_ms=0).claimed
    assert store.complete(done)
    assert done == store.get(key)
    assert isinstance(store.client, redis.cluster.RedisCluster)


def test_username_and_password_authenticate(redis_client: redis.Redis, redis_port: int) -> None:
    """An ACL user's credentials are used; wrong ones fail as a persistence error."""
    user = f"idem-{uuid.uuid4().hex[:8]}"
    redis_client.acl_setuser(
        user, enabled=True, passwords=["+s3cret"], keys="*", commands=["+@all"]
    )
    try:
        good = RedisCachePersistenceLayer(
            host="127.0.0.1", port=redis_port, username=user, password="s3cret", ssl=False
        )
        bad = RedisCachePersistenceLayer(
            host="127.0.0.1", port=redis_port, username=user, password="wrong", ssl=False
        )
        assert good.get("absent") is None
        with pytest.raises(IdempotencyPersistenceLayerError):
            bad.get("absent")
    finally:
        redis_client.acl_deluser(user)


def test_unreachable_server_is_a_persistence_error_and_the_body_does_not_run(
    refused_port: int,
) -> None:
    """Nothing listening: the claim fails with our error type, the redis error as its cause."""
    store = RedisCachePersistenceLayer(host="127.0.0.1", port=refused_port, ssl=False)
    runs: list[int] = []

    @idempotent(persistence_store=store)
    def handler(event: dict[str, Any], context: Any) -> None:
        runs.append(1)

    with pytest.raises(IdempotencyPersistenceLayerError) as caught:
        handler({"n": 1}, FakeLambdaContext())
    assert [] == runs
    assert isinstance(caught.value.__cause__, redis.exceptions.ConnectionError)


def test_key_holding_another_type_fails_closed(
    redis_client: redis.Redis, redis_store: RedisCachePersistenceLayer
) -> None:
    """A plain string at the key (e.g. a Powertools record) is an error, never overwritten."""
    redis_client.set("other#1", '{"status": "COMPLETED"}')
    record = IdempotencyRecord("other#1", Status.IN_PROGRESS, owner="o")
    with pytest.raises(IdempotencyPersistenceLayerError, match="WRONGTYPE"):
        redis_store.claim(record, now_ms=0, lease_cutoff_ms=0)
    assert b'{"status": "COMPLETED"}' == redis_client.get("other#1")


def test_corrupt_hash_error_names_the_field_not_its_content(
    redis_client: redis.Redis, redis_store: RedisCachePersistenceLayer
) -> None:
    """An unknown status or a non-integer expiry is reported by field name."""
    redis_client.hset("bad#1", mapping={"status": "SECRET-VALUE"})
    redis_client.hset("bad#2", mapping={"status": "COMPLETED", "expiration": "SECRET"})
    with pytest.raises(IdempotencyPersistenceLayerError, match="'status'") as first:
        redis_store.get("bad#1")
    with pytest.raises(IdempotencyPersistenceLayerError, match="'expiration'") as second:
        redis_store.get("bad#2")
    assert "SECRET" not in str(first.value) + str(second.value)


def test_corrupt_records_are_the_shared_corrupt_record_error(
    redis_client: redis.Redis, redis_store: RedisCachePersistenceLayer
) -> None:
    """Both layouts report a record off their format as `IdempotencyCorruptRecordError`."""
    powertools = redis_store.with_record_format("powertools")
    redis_client.hset("bad#3", mapping={"status": "COMPLETED", "data": b"x", "data_encoding": "?"})
    redis_client.set("bad#4", "SECRET-NOT-JSON")
    redis_client.set("bad#5", '{"status": "COMPLETED", "expiration": "SECRET"}')
    with pytest.raises(IdempotencyCorruptRecordError, match="'data_encoding'"):
        redis_store.get("bad#3")
    with pytest.raises(IdempotencyCorruptRecordError, match="not JSON") as not_json:
        powertools.get("bad#4")
    with pytest.raises(IdempotencyCorruptRecordError, match="'expiration'") as wrong_type:
        powertools.get("bad#5")
    assert "SECRET" not in str(not_json.value) + str(wrong_type.value)


def test_a_claim_replaces_an_expired_corrupt_record_and_reports_none_replaced(
    redis_client: redis.Redis, redis_store: RedisCachePersistenceLayer
) -> None:
    """An expired hash with an unreadable status is taken over; no previous record comes back."""
    redis_client.hset("bad#6", mapping={"status": "SECRET", "expiration": "1"})
    record = IdempotencyRecord("bad#6", Status.IN_PROGRESS, expiry_timestamp=10**10, owner="o")

    outcome = redis_store.claim(record, now_ms=10_000, lease_cutoff_ms=10_000)

    assert (True, None) == outcome
    assert record == redis_store.get("bad#6")


def test_get_many_leaves_out_corrupt_records(
    redis_client: redis.Redis, redis_store: RedisCachePersistenceLayer
) -> None:
    """A hash off the format is missing from the batch read (the per-key path meets it)."""
    redis_client.hset("bad#7", mapping={"status": "SECRET"})
    good = IdempotencyRecord("good#7", Status.COMPLETED, expiry_timestamp=10**10, owner="o")
    redis_store.claim(good, now_ms=0, lease_cutoff_ms=0)

    assert {"good#7": good} == redis_store.get_many(["bad#7", "good#7"])


def test_redis_py_is_imported_only_when_a_client_is_built() -> None:
    """Importing the package and the store module, and constructing with options, loads no redis."""
    code = (
        "import sys, idempotent_lambda\n"
        "from idempotent_lambda.persistence.redis import RedisCachePersistenceLayer\n"
        "from idempotent_lambda.persistence.cache import CachePersistenceLayer\n"
        "CachePersistenceLayer(host='localhost')\n"
        "print('redis' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert "False" == result.stdout.strip()
