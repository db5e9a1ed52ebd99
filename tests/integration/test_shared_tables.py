"""One table shared by Powertools and this library (``record_format="powertools"``), both ways.

Every test decorates the same function twice, once with real Powertools (a dev dependency) and
once with `idempotent_lambda.idempotent`, on the same DynamoDB table (moto's server) or the same
redis-server, as the two halves of a fleet in the middle of a rolling deploy would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from idempotent_lambda import (
    IdempotencyAlreadyInProgressError,
    IdempotencyConfig,
    IdempotencyValidationError,
    idempotent,
)
from idempotent_lambda._clock import SYSTEM_CLOCK, Clock
from idempotent_lambda._entry import default_prefix
from idempotent_lambda._identity import derive_invocation
from idempotent_lambda._record_format import POWERTOOLS
from idempotent_lambda.persistence.base import PersistenceStore, store_for_format
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.persistence.redis import RedisCachePersistenceLayer
from idempotent_lambda.record import IdempotencyRecord, Status
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests.integration._two_libraries import WAIT_S, Body, Crash

pt = pytest.importorskip("aws_lambda_powertools.utilities.idempotency")
from aws_lambda_powertools.utilities.idempotency import exceptions as pt_errors  # noqa: E402
from aws_lambda_powertools.utilities.idempotency.persistence.redis import (  # noqa: E402
    RedisCachePersistenceLayer as PowertoolsRedis,
)

IN_PROGRESS_ERRORS = (
    IdempotencyAlreadyInProgressError,
    pt_errors.IdempotencyAlreadyInProgressError,
)
LEASE_MS = 120_000  # each invocation's time left: no lease passes while a loaded machine stalls


@dataclass
class Fleet:
    """Builds each library's store on the shared table or server."""

    backend: str
    powertools_store: Callable[[], Any]
    our_store: Callable[[Clock], PersistenceStore]


@pytest.fixture(params=["dynamodb", "redis"])
def fleet(request: pytest.FixtureRequest) -> Fleet:
    """The shared backend: a fresh DynamoDB table, or an emptied redis-server database."""
    if request.param == "dynamodb":
        table = request.getfixturevalue("idempotency_table")
        client = request.getfixturevalue("dynamodb_client")
        return Fleet(
            "dynamodb",
            lambda: pt.DynamoDBPersistenceLayer(table, boto3_client=client),
            lambda clock: DynamoDBPersistenceLayer(table, boto3_client=client, clock=clock),
        )
    port = request.getfixturevalue("redis_port")
    request.getfixturevalue("redis_client")  # empties the database

    def client() -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port)

    return Fleet(
        "redis",
        lambda: PowertoolsRedis(client=client()),
        lambda clock: RedisCachePersistenceLayer(client=client(), clock=clock),
    )


def both(
    fleet: Fleet, body: Body, *, clock: Clock = SYSTEM_CLOCK, **options: Any
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """Return ``body`` decorated by Powertools and by us, with the same options."""
    theirs = pt.idempotent(
        persistence_store=fleet.powertools_store(), config=pt.IdempotencyConfig(**options)
    )(body.handler)
    ours = idempotent(
        persistence_store=fleet.our_store(clock),
        config=IdempotencyConfig(record_format="powertools", **options),
    )(body.handler)
    return theirs, ours


def context(clock: Clock = SYSTEM_CLOCK) -> FakeLambdaContext:
    return FakeLambdaContext(timeout_ms=LEASE_MS, clock=clock)


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


VALIDATED = {"event_key_jmespath": "id", "payload_validation_jmespath": "amount"}


@pytest.mark.parametrize("options", [{}, VALIDATED], ids=["whole-event", "validated"])
@pytest.mark.parametrize("first", ["powertools", "ours"])
def test_a_request_completed_by_one_is_replayed_by_the_other(
    fleet: Fleet, first: str, options: dict[str, Any]
) -> None:
    """Either library replays what the other completed; the body runs once."""
    body = Body()
    theirs, ours = both(fleet, body, **options)
    run, replay = (theirs, ours) if first == "powertools" else (ours, theirs)
    event = {"id": "o-1", "amount": 5}

    result = run(event, context())
    if fleet.backend == "redis" and options and first == "powertools":
        # Powertools' Redis layer drops the validation hash when it completes: its own replay
        # fails validation, and ours fails the same way rather than skip the check.
        with pytest.raises(pt_errors.IdempotencyValidationError):
            run(event, context())
        with pytest.raises(IdempotencyValidationError):
            replay(event, context())
        assert 1 == body.calls
        return
    replayed = replay(event, context())

    assert {"order": "o-1", "run": 1} == result
    assert result == replayed
    assert 1 == body.calls


def test_validation_holds_across_libraries(fleet: Fleet) -> None:
    """A changed payload under a key Powertools completed is refused by us."""
    body = Body()
    theirs, ours = both(fleet, body, **VALIDATED)
    ours({"id": "o-1", "amount": 5}, context())

    with pytest.raises(pt_errors.IdempotencyValidationError):
        theirs({"id": "o-1", "amount": 6}, context())
    if fleet.backend == "dynamodb":  # Powertools' Redis layer keeps no validation hash
        theirs({"id": "o-2", "amount": 5}, context())
        with pytest.raises(IdempotencyValidationError):
            ours({"id": "o-2", "amount": 6}, context())


@pytest.mark.parametrize("holder", ["powertools", "ours"])
def test_an_in_progress_record_held_by_one_blocks_the_other(fleet: Fleet, holder: str) -> None:
    """While one library runs the body, the other refuses; afterwards it replays."""
    body = Body()
    theirs, ours = both(fleet, body)
    first, second = (theirs, ours) if holder == "powertools" else (ours, theirs)
    event = {"id": "o-1"}
    body.go.clear()
    results: list[Any] = []
    running = threading.Thread(target=lambda: results.append(first(event, context())))
    running.start()
    assert body.entered.wait(WAIT_S)

    with pytest.raises(IN_PROGRESS_ERRORS):
        second(event, context())
    body.go.set()
    running.join(WAIT_S)

    assert results == [second(event, context())]
    assert 1 == body.calls


def test_we_never_complete_or_release_a_record_powertools_holds(fleet: Fleet) -> None:
    """Powertools' IN_PROGRESS record has no owner: our fenced writes leave it alone."""
    body = Body()
    theirs, _ = both(fleet, body)
    event = {"id": "o-1"}
    body.go.clear()
    running = threading.Thread(target=theirs, args=(event, context()))
    running.start()
    assert body.entered.wait(WAIT_S)
    store = store_for_format(fleet.our_store(SYSTEM_CLOCK), "powertools")
    config = IdempotencyConfig(record_format="powertools")
    prefix = default_prefix(body.handler, POWERTOOLS)
    key = derive_invocation(config, event, prefix=prefix, now_ms=0, context=None)
    assert key is not None
    held = store.get(key.key)
    assert held is not None
    completed = IdempotencyRecord(key.key, Status.COMPLETED, held.expiry_timestamp, None, "1")

    assert (False, False) == (
        store.complete(IdempotencyRecord(**{**_fields(completed), "owner": "intruder"})),
        store.release(key.key, "intruder"),
    )
    assert held == store.get(key.key)
    body.go.set()
    running.join(WAIT_S)


def _fields(record: IdempotencyRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in IdempotencyRecord.__slots__}


def test_we_honour_powertools_expiry(fleet: Fleet) -> None:
    """A Powertools result is replayed until its expiration, then the body runs again."""
    body = Body()
    clock = ManualClock(wall_ms())
    theirs, ours = both(fleet, body, clock=clock, expires_after_seconds=60)
    event = {"id": "o-1"}
    theirs(event, context())

    before = ours(event, context(clock))
    clock.set(wall_ms() + 62_000)  # past the expiry, however late Powertools wrote it
    after = ours(event, context(clock))

    assert (1, 2) == (before["run"], after["run"])


def test_powertools_honours_our_expiry(fleet: Fleet) -> None:
    """Our record, written two minutes ago with a one-minute expiry, no longer counts for it."""
    body = Body()
    clock = ManualClock(wall_ms() - 120_000)
    theirs, ours = both(fleet, body, clock=clock, expires_after_seconds=60)
    event = {"id": "o-1"}
    ours(event, context(clock))

    assert 2 == theirs(event, context())["run"]


def test_we_honour_a_powertools_lease(fleet: Fleet) -> None:
    """A Powertools claim blocks us while its lease runs; once it has passed we take over."""
    body = Body()
    clock = ManualClock(wall_ms())
    theirs, ours = both(fleet, body, clock=clock)
    event = {"id": "o-1"}
    body.crash = True
    with pytest.raises(Crash):
        theirs(event, context())  # leaves its IN_PROGRESS record, lease LEASE_MS
    body.crash = False

    with pytest.raises(IdempotencyAlreadyInProgressError):
        ours(event, context(clock))
    clock.set(wall_ms() + LEASE_MS + 2_000)  # its lease and the skew tolerance have passed

    assert 2 == ours(event, context(clock))["run"]


def test_powertools_honours_our_lease_and_we_do_not_overwrite_its_result(fleet: Fleet) -> None:
    """Powertools takes over once our lease passed; our late completion is then refused."""
    body = Body()
    clock = ManualClock(wall_ms() - LEASE_MS - 60_000)  # our claim's lease ended 60 s ago
    theirs, ours = both(fleet, body, clock=clock)
    event = {"id": "o-1"}
    body.go.clear()
    late: list[Any] = []
    running = threading.Thread(target=lambda: late.append(ours(event, context(clock))))
    running.start()
    assert body.entered.wait(WAIT_S)

    taken_over = theirs(event, context())  # while our body still runs
    body.go.set()
    running.join(WAIT_S)

    assert 2 == body.calls
    assert taken_over == theirs(event, context())  # ours did not overwrite Powertools' result
    assert ["o-1"] == [result["order"] for result in late]


def test_concurrent_invocations_one_from_each_library_run_the_body_once(fleet: Fleet) -> None:
    """Racing on one key, exactly one library runs the body; the other is refused."""
    for attempt in range(5):
        body = Body()
        theirs, ours = both(fleet, body)
        race = Race({"id": f"o-{attempt}"})
        body.go = race.loser_done  # the winner's body waits until the loser was refused
        threads = [threading.Thread(target=race.invoke, args=(h,)) for h in (theirs, ours)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT_S)

        assert (1, 1) == (body.calls, len(race.refused))


class Race:
    """Two invocations of one event, started together."""

    def __init__(self, event: dict[str, Any]) -> None:
        self.event = event
        self.start = threading.Barrier(2)
        self.refused: list[BaseException] = []
        self.loser_done = threading.Event()

    def invoke(self, handler: Callable[..., Any]) -> None:
        self.start.wait(WAIT_S)
        try:
            handler(self.event, context())
        except IN_PROGRESS_ERRORS as exc:
            self.refused.append(exc)
            self.loser_done.set()


@pytest.mark.parametrize("function_name", [None, "orders"])
def test_composite_keys_share_powertools_partition(
    make_table: Callable[..., str],
    dynamodb_client: Any,
    function_name: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a sort key, both default the partition to ``idempotency#{function name}``."""
    if function_name is None:
        monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    else:
        monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", function_name)
    table = make_table(key_attr="pk", sort_key_attr="sk")
    options = {"key_attr": "pk", "sort_key_attr": "sk"}
    fleet = Fleet(
        "dynamodb",
        lambda: pt.DynamoDBPersistenceLayer(table, boto3_client=dynamodb_client, **options),
        lambda clock: DynamoDBPersistenceLayer(
            table, boto3_client=dynamodb_client, clock=clock, **options
        ),
    )
    body = Body()
    theirs, ours = both(fleet, body)

    first = theirs({"id": "o-1"}, context())
    second = ours({"id": "o-2"}, context())

    assert (first, second) == (ours({"id": "o-1"}, context()), theirs({"id": "o-2"}, context()))
    assert 2 == body.calls
    partitions = {item["pk"]["S"] for item in dynamodb_client.scan(TableName=table)["Items"]}
    assert {f"idempotency#{function_name or ''}"} == partitions
