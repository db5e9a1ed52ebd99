"""The DynamoDB Stream adapter: typed records, default key, ordering, malformed records."""

from __future__ import annotations

import copy
import datetime
import json
import logging
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from idempotent_lambda import IdempotencyConfig, InMemoryPersistenceLayer
from idempotent_lambda._identity import digest
from idempotent_lambda.adapters.dynamodb_stream import (
    DynamoDBStreamRecord,
    idempotent_stream_handler,
)
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests.unit._doubles import SpyStore

EVENTS = Path(__file__).parents[1] / "events"
PREFIX = "items"
TABLE_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/ExampleTableWithStream"


def load(name: str) -> dict[str, Any]:
    """Return a stored event fixture."""
    return json.loads((EVENTS / name).read_text())  # type: ignore[no-any-return]


def change(sequence: int, *, item: int = 101, arn: str | None = None) -> dict[str, Any]:
    """Return the SAM-generated MODIFY record with another sequence number and item id."""
    record: dict[str, Any] = copy.deepcopy(load("dynamodb_stream_update.json")["Records"][1])
    record["dynamodb"]["SequenceNumber"] = str(sequence)
    record["dynamodb"]["Keys"]["Id"]["N"] = str(item)
    record["dynamodb"]["NewImage"]["Id"]["N"] = str(item)
    if arn is not None:
        record["eventSourceARN"] = arn
    return record


def failed(response: Mapping[str, Any]) -> list[str]:
    """Return the reported identifiers, in order."""
    return [failure["itemIdentifier"] for failure in response["batchItemFailures"]]


class Calls:
    """A record handler that remembers the records it saw and fails chosen sequence numbers."""

    def __init__(self, fail: set[str] | None = None) -> None:
        self.fail = fail or set()
        self.records: list[DynamoDBStreamRecord] = []

    @property
    def seen(self) -> list[str]:
        """Return the sequence numbers seen, in order."""
        return [record.sequence_number for record in self.records]

    def __call__(self, record: DynamoDBStreamRecord, context: Any) -> str:
        self.records.append(record)
        if record.sequence_number in self.fail:
            raise RuntimeError("downstream refused")
        return record.event_name


def make(store: Any, calls: Calls, config: IdempotencyConfig | None = None) -> Any:
    """Return the batch handler of ``calls``."""
    return idempotent_stream_handler(persistence_store=store, config=config, key_prefix=PREFIX)(
        calls
    )


# --- typed records -----------------------------------------------------------------------------


def test_sam_update_event_reaches_the_handler_deserialised(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """INSERT, MODIFY and REMOVE arrive with Python keys and images, in order."""
    calls = Calls()
    event = load("dynamodb_stream_update.json")
    assert [] == failed(make(idempotency_store, calls)(event, lambda_context))
    insert, modify, remove = calls.records
    assert ("INSERT", "MODIFY", "REMOVE") == (
        insert.event_name,
        modify.event_name,
        remove.event_name,
    )
    assert {"Id": Decimal(101)} == insert.keys
    assert {"Message": "New item!", "Id": Decimal(101)} == insert.new_image
    assert insert.old_image is None
    assert {"Message": "New item!", "Id": Decimal(101)} == modify.old_image
    assert remove.new_image is None
    assert "4421584500000000017450439092" == modify.sequence_number
    assert "c81e728d9d4c2f636f067f89cc14862c" == modify.event_id
    assert "NEW_AND_OLD_IMAGES" == modify.stream_view_type
    assert (
        datetime.datetime(2015, 4, 9, tzinfo=datetime.timezone.utc)
        == modify.approximate_creation_time
    )
    assert TABLE_ARN == modify.table_arn
    assert "ExampleTableWithStream" == modify.table_name
    assert not remove.is_ttl_removal
    assert event["Records"][1] is modify.raw
    assert "This item has changed" not in repr(modify)


def test_every_attribute_type_is_deserialised(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Numbers are Decimal, binary is bytes, sets are sets, maps and lists nest."""
    calls = Calls()
    make(idempotency_store, calls)(load("dynamodb_stream_types.json"), lambda_context)
    (record,) = calls.records
    assert {
        "pk": "order#1",
        "sk": Decimal(1),
        "price": Decimal("19.99"),
        "blob": b"hello",
        "tags": {"a", "b"},
        "sizes": {Decimal(1), Decimal("2.5")},
        "blobs": {b"\x01", b"\x02"},
        "meta": {"ok": True, "none": None},
        "items": ["x", Decimal(3)],
    } == record.new_image
    assert {"pk": "order#1", "sk": Decimal(1)} == record.keys
    assert (
        datetime.datetime(2023, 11, 14, 22, 13, 20, 500000, tzinfo=datetime.timezone.utc)
        == record.approximate_creation_time
    )


def test_ttl_removal_is_recognised_and_delivered(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A REMOVE by the TTL service principal is flagged; the handler still gets it."""
    calls = Calls()
    make(idempotency_store, calls)(load("dynamodb_stream_ttl_removal.json"), lambda_context)
    (record,) = calls.records
    assert record.is_ttl_removal
    assert {"pk": "session#42", "expires_at": Decimal(1699999990)} == record.old_image
    assert "Sessions" == record.table_name


@pytest.mark.parametrize(
    ("event_name", "identity"),
    [
        ("REMOVE", None),
        ("REMOVE", {"type": "Service", "principalId": "someone.amazonaws.com"}),
        ("REMOVE", {"type": "User", "principalId": "dynamodb.amazonaws.com"}),
        ("MODIFY", {"type": "Service", "principalId": "dynamodb.amazonaws.com"}),
    ],
)
def test_other_changes_are_not_ttl_removals(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    event_name: str,
    identity: Any,
) -> None:
    """Only REMOVE + Service + dynamodb.amazonaws.com is a TTL removal."""
    record = load("dynamodb_stream_ttl_removal.json")["Records"][0]
    record["eventName"] = event_name
    if identity is None:
        del record["userIdentity"]
    else:
        record["userIdentity"] = identity
    calls = Calls()
    make(idempotency_store, calls)({"Records": [record]}, lambda_context)
    assert not calls.records[0].is_ttl_removal


# --- keys and replays --------------------------------------------------------------------------


def test_default_key_is_table_item_keys_and_sequence_number(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The claim key hashes the table ARN (its scope), the raw Keys and the sequence number."""
    spy = SpyStore(idempotency_store)
    make(spy, Calls())({"Records": [change(5)]}, lambda_context)
    material = {"source": TABLE_ARN, "key": {"keys": {"Id": {"N": "101"}}, "sequence_number": "5"}}
    assert f"{PREFIX}#{digest(IdempotencyConfig(), material)}" == spy.claims[0].idempotency_key


def test_re_read_records_replay_and_new_changes_run(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The same record re-read replays; another sequence number or table runs."""
    calls = Calls()
    handler = make(idempotency_store, calls)
    assert [] == failed(handler({"Records": [change(1), change(2)]}, lambda_context))
    other_table = "arn:aws:dynamodb:us-east-1:123456789012:table/Other/stream/2020-01-01T00:00:00"
    event = {"Records": [change(1), change(2), change(3), change(1, arn=other_table)]}
    assert [] == failed(handler(event, lambda_context))
    assert ["1", "2", "3", "1"] == calls.seen


def test_event_key_jmespath_reads_the_raw_record(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A key on ``eventID`` makes two deliveries of one change run once."""
    calls = Calls()
    config = IdempotencyConfig(event_key_jmespath="eventID")
    first, second = change(1), change(2)
    second["eventID"] = first["eventID"]
    assert [] == failed(make(idempotency_store, calls, config)({"Records": [first, second]}, None))
    assert ["1"] == calls.seen


def test_business_key_is_scoped_to_the_table_not_to_the_stream_label(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """One item version from two tables runs twice; from two labels of one table's stream, once."""
    calls = Calls()
    config = IdempotencyConfig(event_key_jmespath="[dynamodb.Keys, dynamodb.NewImage.Id.N]")
    handler = make(idempotency_store, calls, config)
    relabelled = f"{TABLE_ARN}/stream/2030-01-01T00:00:00.000"
    other_table = "arn:aws:dynamodb:us-east-1:123456789012:table/Other/stream/2020-01-01T00:00:00"
    event = {"Records": [change(1), change(2, arn=relabelled), change(3, arn=other_table)]}
    assert [] == failed(handler(event, lambda_context))
    assert ["1", "3"] == calls.seen


# --- ordering ----------------------------------------------------------------------------------


def test_first_failure_stops_the_batch_and_reports_it_and_every_later_record(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Lambda resumes from the lowest failed sequence number; later records must wait."""
    calls = Calls(fail={"3"})
    event = {"Records": [change(n) for n in range(1, 6)]}
    with caplog.at_level(logging.WARNING, logger="idempotent_lambda"):
        response = make(idempotency_store, calls)(event, lambda_context)
    assert ["3", "4", "5"] == failed(response)
    assert ["1", "2", "3"] == calls.seen
    assert "batch record failed: source=dynamodb_stream id=3 error=RuntimeError" in caplog.text


def test_retry_from_the_failed_record_replays_nothing_twice(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Lambda's retry starts at the failure; every record runs exactly once overall."""
    calls = Calls(fail={"3"})
    handler = make(idempotency_store, calls)
    records = [change(n) for n in range(1, 6)]
    assert ["3", "4", "5"] == failed(handler({"Records": records}, lambda_context))
    calls.fail.clear()
    assert [] == failed(handler({"Records": records[2:]}, lambda_context))
    assert ["1", "2", "3", "3", "4", "5"] == calls.seen


@pytest.mark.parametrize(
    "breakage",
    [
        lambda r: r.pop("eventID"),
        lambda r: r.update(eventName="UPSERT"),
        lambda r: r["dynamodb"].pop("Keys"),
        lambda r: r["dynamodb"].update(Keys=["Id"]),
        lambda r: r["dynamodb"].update(NewImage={"Id": {"X": "1"}}),
        lambda r: r["dynamodb"].update(NewImage={"Id": {}}),
        lambda r: r["dynamodb"].update(NewImage={"n": {"N": "not a number"}}),
        lambda r: r["dynamodb"].update(NewImage={"b": {"B": "!!not base64!!"}}),
        lambda r: r["dynamodb"].update(ApproximateCreationDateTime="yesterday"),
        lambda r: r["dynamodb"].update(ApproximateCreationDateTime=1e20),
        lambda r: r["dynamodb"].update(StreamViewType=3),
        lambda r: r.update(eventSourceARN=["arn"]),
    ],
)
def test_malformed_record_fails_there_and_stops_the_batch(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    caplog: pytest.LogCaptureFixture,
    breakage: Any,
) -> None:
    """The broken record is logged and reported with every later one; earlier ones ran."""
    records = [change(n) for n in range(1, 4)]
    breakage(records[1])
    calls = Calls()
    with caplog.at_level(logging.WARNING, logger="idempotent_lambda"):
        response = make(idempotency_store, calls)({"Records": records}, lambda_context)
    assert ["2", "3"] == failed(response)
    assert ["1"] == calls.seen
    assert "id=2 error=MalformedRecordError" in caplog.text


def test_record_without_a_sequence_number_fails_the_whole_batch(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """It has no identifier to report, so every record is reported and none processed."""
    records = [change(1), change(2), change(3)]
    del records[1]["dynamodb"]["SequenceNumber"]
    records.append({"dynamodb": "nope"})
    calls = Calls()
    assert ["1", "3"] == failed(make(idempotency_store, calls)({"Records": records}, None))
    assert [] == calls.seen


def test_time_budget_applies_to_streams(
    idempotency_store: InMemoryPersistenceLayer,
    idempotency_clock: ManualClock,
    lambda_context: FakeLambdaContext,
) -> None:
    """Below the margin no record starts; the rest is reported."""
    calls = Calls()

    @idempotent_stream_handler(persistence_store=idempotency_store, time_safety_margin_ms=15_000)
    def handler(record: DynamoDBStreamRecord, context: Any) -> None:
        calls(record, context)
        idempotency_clock.advance(seconds=10)

    event = {"Records": [change(n) for n in range(1, 4)]}
    assert ["3"] == failed(handler(event, lambda_context))
    assert ["1", "2"] == calls.seen
