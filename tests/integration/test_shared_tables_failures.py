"""Failures on a table shared with Powertools: what the native format guarantees holds by default.

A result that cannot be stored (it has no JSON form, its encoding raises, or its JSON is over
400,000 bytes) is an `IdempotencyUnstorableResultError`, and no retry of either library runs the
body again until the record expires: the record is held IN_PROGRESS until its expiration, which
Powertools refuses as in progress. A stored result is the user's data, always: one that reads
like an internal marker replays as itself in both libraries. Real Powertools 3.37 runs against
moto's DynamoDB server and a real redis-server.
"""

from __future__ import annotations

from typing import Any

import pytest

from idempotent_lambda import IdempotencyConfig, IdempotencyUnstorableResultError
from idempotent_lambda._record_format import MAX_STORED_DATA_BYTES, POWERTOOLS_UNSTORABLE_ATTR
from idempotent_lambda.testing import ManualClock
from tests.integration._two_libraries import (
    BACKENDS,
    Body,
    Fleet,
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


class Opaque:
    """A result with no JSON form."""


class ExplodingMapping(dict[str, Any]):
    """A mapping whose items() raises while the result is encoded."""

    def items(self) -> Any:
        raise RuntimeError("items() failed")


UNSTORABLE = {
    "no-json-form": lambda: {"order": Opaque()},
    "items-raises": lambda: ExplodingMapping(order="o-1"),
    "a-set": lambda: {"skus": {"a", "b"}},
    "over-400000-bytes": lambda: "x" * MAX_STORED_DATA_BYTES,  # its JSON has two quotes more
}


def raw_value(record: dict[str, Any], name: str) -> Any:
    """Return attribute ``name`` of a raw record: a DynamoDB item's value, or a JSON field's."""
    value = record.get(name)
    if isinstance(value, dict):
        ((_, inner),) = value.items()
        return inner
    return value


@pytest.mark.parametrize("make_result", UNSTORABLE.values(), ids=UNSTORABLE)
def test_an_unstorable_result_is_never_run_again_by_either_library(
    fleet: Fleet, make_result: Any
) -> None:
    """Typed error for us, in progress for Powertools, until the record expires: one run."""
    body = Body()
    body.result = make_result()
    theirs, ours = both(fleet, body, event_key_jmespath="id", payload_validation_jmespath="id")
    event = {"id": "o-1"}

    with pytest.raises(IdempotencyUnstorableResultError):
        ours(event, context())
    with pytest.raises(IdempotencyUnstorableResultError, match="could not be stored"):
        ours(event, context())
    with pytest.raises(pt_errors.IdempotencyAlreadyInProgressError):
        theirs(event, context())

    assert 1 == body.calls
    (held,) = fleet.read_raw()
    expiration = int(raw_value(held, "expiration"))
    assert ("INPROGRESS", (expiration + 1) * 1000, None) == (
        raw_value(held, "status"),
        int(raw_value(held, "in_progress_expiration")),
        held.get("data"),
    )
    reason = raw_value(held, POWERTOOLS_UNSTORABLE_ATTR)  # why, for us; Powertools ignores it
    assert isinstance(reason, str)
    assert reason


def test_a_held_unstorable_record_expires_for_both_libraries(fleet: Fleet) -> None:
    """Once the held record expired, Powertools runs the request again, and so do we."""
    body = Body()
    body.result = {"order": Opaque()}
    clock = ManualClock(wall_ms() - 120_000)  # the first call happened two minutes ago
    _, ours_then = both(fleet, body, clock=clock, expires_after_seconds=60)
    theirs, ours = both(fleet, body, expires_after_seconds=60)
    event = {"id": "o-1"}
    with pytest.raises(IdempotencyUnstorableResultError):
        ours_then(event, context(clock))
    body.result = None

    assert 2 == theirs(event, context())["run"]
    assert 2 == ours(event, context())["run"]  # Powertools' new result, replayed
    assert 2 == body.calls


def test_a_result_at_the_limit_is_stored_as_plain_text_and_replayed_by_powertools(
    fleet: Fleet,
) -> None:
    """400,000 bytes of JSON are stored as text (never compressed); Powertools replays it."""
    body = Body()
    body.result = "x" * (MAX_STORED_DATA_BYTES - 2)  # with its quotes: exactly the limit
    theirs, ours = both(fleet, body)
    event = {"id": "o-1"}

    first = ours(event, context())
    replayed = theirs(event, context())

    (stored,) = fleet.read_raw()
    data = stored["data"]
    assert isinstance(data.get("S") if isinstance(data, dict) else data, str)
    assert (body.result, body.result, 1) == (first, replayed, body.calls)


LOOKALIKES = {
    "s3-reference": {"$s3": {"bucket": "attacker", "key": "x", "sha256": "0" * 64, "size": 1}},
    "native-marker": {"$unstorable": "line one\nline two"},
    "default-marker-text": "$unstorable:chosen by the client",
    "native-wrapper": {"$decimal": "1.10"},
}


@pytest.mark.parametrize("result", LOOKALIKES.values(), ids=LOOKALIKES)
@pytest.mark.parametrize("first", ["powertools", "ours"])
def test_a_result_that_reads_like_a_marker_replays_as_data(
    fleet: Fleet, first: str, result: Any
) -> None:
    """A client-chosen result shaped like an S3 reference or a marker is only ever data."""
    body = Body()
    body.result = result
    theirs, ours = both(fleet, body)
    run, replay = (theirs, ours) if first == "powertools" else (ours, theirs)
    event = {"id": "o-1"}

    assert result == run(event, context())
    assert (result, result) == (replay(event, context()), ours(event, context()))
    assert 1 == body.calls


def test_our_config_default_is_the_literal_swap() -> None:
    """No ``record_format`` and no ``hash_function``: Powertools' format and its md5."""
    config = IdempotencyConfig()

    assert ("powertools", None, "md5") == (
        config.record_format,
        config.hash_function,
        config.hash_name,
    )
