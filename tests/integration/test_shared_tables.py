"""One table shared by Powertools and this library with the default config, both ways.

Every test decorates the same function twice, once with real Powertools (a dev dependency) and
once with `idempotent_lambda.idempotent`, on the same DynamoDB table (moto's server) or the same
redis-server, as the two halves of a fleet in the middle of a rolling deploy (or a rollback)
would. Both get the same options and nothing else: no ``record_format``, no ``hash_function``,
the literal import swap.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyAlreadyInProgressError,
    IdempotencyConfig,
    IdempotencyValidationError,
    idempotent,
)
from idempotent_lambda._clock import SYSTEM_CLOCK
from idempotent_lambda._entry import default_prefix
from idempotent_lambda._identity import derive_invocation
from idempotent_lambda.persistence.base import store_for_format
from idempotent_lambda.record import IdempotencyRecord, Status
from idempotent_lambda.testing import ManualClock
from tests.integration._two_libraries import (
    BACKENDS,
    IN_PROGRESS_ERRORS,
    LEASE_MS,
    WAIT_S,
    Body,
    Crash,
    Fleet,
    Race,
    both,
    context,
    fleet_on,
    pt_errors,
    wall_ms,
)


@pytest.fixture(params=BACKENDS)
def fleet(request: pytest.FixtureRequest) -> Fleet:
    """The shared backend: a fresh DynamoDB table, or an emptied redis-server database."""
    return fleet_on(request, request.param)


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
    config = IdempotencyConfig()
    store = store_for_format(fleet.our_store(SYSTEM_CLOCK), config.record_format)
    prefix = default_prefix(body.handler, config.format)
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
        race = Race({"id": f"o-{attempt}"}, context())
        body.go = race.loser_done  # the winner's body waits until the loser was refused
        race.run(theirs, ours)

        assert (1, 1) == (body.calls, len(race.refused))


def test_we_wait_for_a_powertools_invocation_and_return_its_result(fleet: Fleet) -> None:
    """With ``wait_for_in_progress_seconds``, we wait out Powertools' claim and replay it."""
    body = Body()
    theirs, _ = both(fleet, body)
    config = IdempotencyConfig(wait_for_in_progress_seconds=WAIT_S)
    store = store_for_format(fleet.our_store(SYSTEM_CLOCK), config.record_format)
    read = store.get

    def polled(key: str) -> Any:  # our first poll lets Powertools' body finish
        body.go.set()
        return read(key)

    store.get = polled  # type: ignore[method-assign]
    waiting = idempotent(persistence_store=store, config=config)(body.handler)
    event = {"id": "o-1"}
    body.go.clear()
    results: list[Any] = []
    running = threading.Thread(target=lambda: results.append(theirs(event, context())))
    running.start()
    assert body.entered.wait(WAIT_S)

    waited = waiting(event, context())
    running.join(WAIT_S)

    assert results == [waited]
    assert 1 == body.calls


@pytest.mark.parametrize("function_name", [None, "orders"])
def test_composite_keys_share_powertools_partition(
    request: pytest.FixtureRequest,
    dynamodb_client: Any,
    function_name: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a sort key, both default the partition to ``idempotency#{function name}``."""
    if function_name is None:
        monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    else:
        monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", function_name)
    fleet = fleet_on(request, "dynamodb", key_attr="pk", sort_key_attr="sk")
    body = Body()
    theirs, ours = both(fleet, body)

    first = theirs({"id": "o-1"}, context())
    second = ours({"id": "o-2"}, context())

    assert (first, second) == (ours({"id": "o-1"}, context()), theirs({"id": "o-2"}, context()))
    assert 2 == body.calls
    partitions = {item["pk"]["S"] for item in fleet.read_raw()}
    assert {f"idempotency#{function_name or ''}"} == partitions
