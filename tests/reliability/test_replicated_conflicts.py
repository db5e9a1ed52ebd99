"""ReplicatedWriteConflictException (MRSC global tables) is contention, not an outage.

The conflict is injected at the HTTP level into the store's own botocore client (the fault
injector of test_faults), on a real table of moto's server. A conflict that clears is retried
by the engine with the same request (the same owner condition for a completion or a release);
one that outlasts the retries ends a claim as an in-progress duplicate would, and a completion
or a release as that step's store failure does (docs/reliability.md).
"""

from __future__ import annotations

from typing import Any

import pytest

from idempotent_lambda import IdempotencyAlreadyInProgressError
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.record import Status
from idempotent_lambda.testing import ManualClock
from tests.reliability._faults import CONFLICT
from tests.reliability.test_faults import (  # noqa: F401 - fixtures
    BodyError,
    Scenario,
    fast_backoff,
    production_store,
)

pytestmark = pytest.mark.usefixtures("fast_backoff")


@pytest.fixture
def scenario(
    production_store: tuple[DynamoDBPersistenceLayer, ManualClock],  # noqa: F811
    dynamodb_store: DynamoDBPersistenceLayer,
) -> Scenario:
    store, clock = production_store
    return Scenario(store, clock, dynamodb_store)


def call(scenario: Scenario, order: str, step: str, times: int | None) -> tuple[str, Any, int]:
    scenario.injector.arm(step, CONFLICT, times=times)
    try:
        return scenario.call({"order": order})
    finally:
        scenario.injector.disarm()


@pytest.mark.parametrize("step", ["claim", "complete", "release"])
def test_a_conflict_that_clears_is_retried_and_changes_nothing(
    scenario: Scenario, step: str
) -> None:
    """Four conflicting attempts, then success: the outcome of a call that met none.

    botocore's own retries (3 attempts) absorb three; the engine's retry meets the fourth.
    """
    scenario.raise_first = step == "release"
    kind, _, ran = call(scenario, f"clears-{step}", step, times=4)

    assert 1 == ran
    assert 4 == scenario.injector.injected[step]
    record = scenario.record({"order": f"clears-{step}"})
    if step == "release":
        assert "BodyError" == kind
        assert record is None
        assert ["RELEASED"] == scenario.decisions
    else:
        assert "result" == kind
        assert record is not None
        assert Status.COMPLETED is record.status
        assert ["CLAIMED"] == scenario.decisions


def test_a_claim_that_keeps_conflicting_answers_as_in_progress(scenario: Scenario) -> None:
    """The body does not run; the caller is told the key is busy; a retry runs it."""
    kind, _, ran = call(scenario, "busy-claim", "claim", times=None)

    assert "IdempotencyAlreadyInProgressError" == kind
    assert 0 == ran
    assert ["IN_PROGRESS"] == scenario.decisions
    assert scenario.record({"order": "busy-claim"}) is None
    kind, _, ran = scenario.call({"order": "busy-claim"})
    assert ("result", 1) == (kind, ran)


def test_a_claim_conflict_over_a_completed_record_replays_it(scenario: Scenario) -> None:
    """The record the other Region completed is read and replayed: nothing runs twice."""
    first = scenario.call({"order": "done"})
    kind, value, ran = call(scenario, "done", "claim", times=None)

    assert ("result", 1) == (first[0], first[2])
    assert ("result", 0) == (kind, ran)
    assert first[1] == value


def test_a_completion_that_keeps_conflicting_returns_the_result(scenario: Scenario) -> None:
    """As any failed completion: the result is returned, the record waits for its lease."""
    kind, _, ran = call(scenario, "busy-complete", "complete", times=None)

    assert ("result", 1) == (kind, ran)
    assert "COMPLETE_FAILED" in scenario.decisions
    record = scenario.record({"order": "busy-complete"})
    assert record is not None
    assert Status.IN_PROGRESS is record.status
    with pytest.raises(IdempotencyAlreadyInProgressError):
        scenario.handler({"order": "busy-complete"}, None)


def test_a_release_that_keeps_conflicting_raises_the_body_error(scenario: Scenario) -> None:
    """As any failed release: the body's own error, with a note; the record waits."""
    scenario.raise_first = True
    kind, value, ran = call(scenario, "busy-release", "release", times=None)

    assert ("BodyError", 1) == (kind, ran)
    assert isinstance(value, BodyError)
    assert any("releasing the record failed" in note for note in value.__notes__)
    assert "RELEASE_FAILED" in scenario.decisions
