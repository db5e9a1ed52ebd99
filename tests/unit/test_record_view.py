"""The operator's view of a stored record: status as stored, result decoded, nothing fetched."""

from __future__ import annotations

import json
from decimal import Decimal

from idempotent_lambda._record_format import NATIVE, POWERTOOLS
from idempotent_lambda.persistence.dynamodb._record_view import RecordView
from idempotent_lambda.record import IdempotencyRecord, Status


def _record(status: Status, data: str | None = None) -> IdempotencyRecord:
    return IdempotencyRecord(
        "orders#abc", status, expiry_timestamp=2_000_000_000, response_data=data
    )


def test_in_progress_is_spelled_as_each_format_stores_it() -> None:
    """Powertools' format stores INPROGRESS; the native one IN_PROGRESS."""
    record = _record(Status.IN_PROGRESS)
    assert "INPROGRESS" == RecordView.of(record, "powertools").stored_status
    assert "IN_PROGRESS" == RecordView.of(record, "native").stored_status
    assert "COMPLETED" == RecordView.of(_record(Status.COMPLETED), "powertools").stored_status


def test_a_result_is_decoded_in_the_format_it_was_stored_in() -> None:
    """Each format's stored text comes back as the value stored."""
    value = {"order": 7, "total": Decimal("9.5")}
    for name, record_format in (("native", NATIVE), ("powertools", POWERTOOLS)):
        stored = _record(Status.COMPLETED, record_format.encode_result(value))
        found = RecordView.of(stored, name)
        assert (record_format.decode_result(stored.response_data or ""), None, None) == (
            found.result,
            found.offloaded,
            found.unstorable_reason,
        )


def test_an_offloaded_result_is_its_reference_and_is_not_fetched() -> None:
    """The native format's S3 reference is read, not followed; a broken one says so."""
    reference = {"bucket": "b", "key": "k", "sha256": "ab", "size": 12, "encoding": "zlib"}
    found = RecordView.of(_record(Status.COMPLETED, json.dumps({"$s3": reference})), "native")
    assert (None, {"bucket": "b", "key": "k", "size": 12, "sha256": "ab"}) == (
        found.result,
        found.offloaded,
    )
    broken = RecordView.of(_record(Status.COMPLETED, json.dumps({"$s3": {}})), "native")
    assert {"malformed": True} == broken.offloaded


def test_an_unstorable_result_says_why() -> None:
    """A result that could not be stored is its reason, and no result."""
    marker = NATIVE.unstorable_marker("too large")
    found = RecordView.of(_record(Status.COMPLETED, marker), "native")
    assert ("too large", None) == (found.unstorable_reason, found.result)
