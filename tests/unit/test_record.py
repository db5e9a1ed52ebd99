"""IdempotencyRecord keeps Powertools' DataRecord names with their meaning."""

from __future__ import annotations

import dataclasses
import datetime
import time

import pytest

from idempotent_lambda import IdempotencyRecord, Status


def record(expiry_s: int) -> IdempotencyRecord:
    """Return a COMPLETED record expiring at ``expiry_s``."""
    return IdempotencyRecord("k", Status.COMPLETED, expiry_timestamp=expiry_s, response_data="1")


def test_is_expired_is_a_property_on_the_wall_clock() -> None:
    """As on Powertools' DataRecord, ``is_expired`` is a bool, not a method."""
    now_s = int(time.time())
    assert record(now_s - 10).is_expired is True
    assert record(now_s + 3600).is_expired is False


def test_expired_at_compares_whole_seconds() -> None:
    """Expired once the expiration second is strictly before the given time's second."""
    assert record(100).expired_at(100_999) is False
    assert record(100).expired_at(101_000) is True


def test_status_and_datetime_follow_the_record() -> None:
    """EXPIRED is derived; the expiration reads back as an aware UTC datetime."""
    assert Status.EXPIRED == record(100).effective_status(101_000)
    expected = datetime.datetime(1970, 1, 1, 0, 1, 40, tzinfo=datetime.timezone.utc)
    assert expected == record(100).get_expiration_datetime()
    assert 1 == record(100).response_json_as_dict()


def test_records_are_immutable_values() -> None:
    """Records are frozen and compare by value, however they were built; replace() works."""
    by_position = IdempotencyRecord("k", Status.IN_PROGRESS, 10, 5_000, None, "h", "owner")
    by_name = IdempotencyRecord(
        idempotency_key="k",
        status=Status.IN_PROGRESS,
        expiry_timestamp=10,
        in_progress_expiry_timestamp=5_000,
        payload_hash="h",
        owner="owner",
    )
    assert by_position == by_name
    assert hash(by_position) == hash(by_name)
    with pytest.raises(dataclasses.FrozenInstanceError):
        by_position.status = Status.COMPLETED  # type: ignore[misc]
    done = dataclasses.replace(by_position, status=Status.COMPLETED, response_data="1")
    assert (Status.COMPLETED, "1", "owner") == (done.status, done.response_data, done.owner)
    assert Status.IN_PROGRESS is by_position.status
