"""The Kinesis adapter: typed records, default key, partition-key order, the checkpoint rule."""

from __future__ import annotations

import base64
import datetime
import logging
import threading
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idempotent_lambda import IdempotencyConfig, InMemoryPersistenceLayer
from idempotent_lambda._identity import digest
from idempotent_lambda.adapters.kinesis import (
    KinesisRecord,
    MalformedEventError,
    idempotent_kinesis_handler,
)
from idempotent_lambda.testing import FakeLambdaContext, KinesisRecordFields, kinesis_event
from tests.unit._doubles import BatchSpyStore, SpyStore

PREFIX = "clicks"
STREAM = "arn:aws:kinesis:us-east-1:123456789012:stream/clicks"


def failed(response: Mapping[str, Any]) -> list[str]:
    """Return the reported identifiers, in order."""
    return [failure["itemIdentifier"] for failure in response["batchItemFailures"]]


def records(*keyed: tuple[str, Any], stream: str = STREAM) -> list[dict[str, Any]]:
    """Return one Kinesis record per ``(partition key, data)``, in increasing sequence order."""
    fields = [KinesisRecordFields(partition_key=key, data=data) for key, data in keyed]
    return list(kinesis_event(records=fields, stream_arn=stream)["Records"])


def sequence(record: Mapping[str, Any]) -> str:
    """Return a raw record's sequence number."""
    return str(record["kinesis"]["sequenceNumber"])


def from_checkpoint(batch: list[dict[str, Any]], response: Mapping[str, Any]) -> dict[str, Any]:
    """Return what Lambda sends next: every record from the lowest reported sequence number."""
    lowest = min(int(identifier) for identifier in failed(response))
    return {"Records": [record for record in batch if int(sequence(record)) >= lowest]}


class Calls:
    """A record handler that remembers ``(partition key, data["n"])`` and fails chosen ``n``."""

    def __init__(self, fail: set[int] | None = None) -> None:
        self.fail = fail or set()
        self.records: list[KinesisRecord] = []
        self._lock = threading.Lock()

    def seen(self, key: str | None = None) -> list[int]:
        """Return the ``n`` handled (of partition key ``key``), in the order they ran."""
        with self._lock:
            found = [r for r in self.records if key is None or r.partition_key == key]
        return [r.json_data["n"] for r in found]

    def __call__(self, record: KinesisRecord, context: Any) -> int:
        with self._lock:
            self.records.append(record)
        if record.json_data["n"] in self.fail:
            raise RuntimeError("downstream refused")
        return int(record.json_data["n"])


def make(store: Any, calls: Calls, config: IdempotencyConfig | None = None, **options: Any) -> Any:
    """Return the batch handler of ``calls``."""
    return idempotent_kinesis_handler(
        persistence_store=store, config=config, key_prefix=PREFIX, **options
    )(calls)


# --- typed records -----------------------------------------------------------------------------


def test_record_handler_receives_the_decoded_record(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Data is base64-decoded; key, sequence number, arrival, ids and the raw dict are there."""
    event = kinesis_event(data={"n": 1, "card": "4111"}, partition_key="user-1", stream_arn=STREAM)
    event["Records"][0]["kinesis"]["approximateArrivalTimestamp"] = 1_700_000_000.5
    calls = Calls()
    assert [] == failed(make(idempotency_store, calls)(event, lambda_context))
    (record,) = calls.records
    raw = event["Records"][0]
    assert b'{"n": 1, "card": "4111"}' == record.data
    assert {"n": 1, "card": "4111"} == record.json_data
    assert ("user-1", sequence(raw)) == (record.partition_key, record.sequence_number)
    assert datetime.datetime(2023, 11, 14, 22, 13, 20, 500000, tzinfo=datetime.timezone.utc) == (
        record.approximate_arrival_time
    )
    assert raw["eventID"] == record.event_id
    assert "shardId-000000000000" == record.shard_id
    assert STREAM == record.event_source_arn
    assert raw is record.raw
    assert "4111" not in repr(record)


def test_default_key_is_the_stream_and_the_event_id(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The claim hashes the stream ARN (the scope) and the eventID (shard + sequence number)."""
    spy = SpyStore(idempotency_store)
    batch = records(("a", {"n": 1}))
    make(spy, Calls())({"Records": batch}, lambda_context)
    material = {"source": STREAM, "key": batch[0]["eventID"]}
    assert [f"{PREFIX}#{digest(IdempotencyConfig(), material)}"] == [
        claim.idempotency_key for claim in spy.claims
    ]


def test_resent_records_replay_and_the_same_ids_from_another_stream_run(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A record sent again replays; the same shard and sequence number of another stream runs."""
    calls = Calls()
    handler = make(idempotency_store, calls)
    batch = records(("a", {"n": 1}), ("b", {"n": 2}))
    assert [] == failed(handler({"Records": batch}, lambda_context))
    assert [] == failed(handler({"Records": batch}, lambda_context))
    other = [{**record, "eventSourceARN": f"{STREAM}-copy"} for record in batch]
    assert [] == failed(handler({"Records": other}, lambda_context))
    assert [1, 2, 1, 2] == sorted(calls.seen()[:2]) + sorted(calls.seen()[2:])


def test_business_key_from_the_decoded_data_runs_two_records_once(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """``event_key_jmespath`` reads the raw record, base64 and JSON included."""
    config = IdempotencyConfig(
        event_key_jmespath="powertools_json(powertools_base64(kinesis.data)).order"
    )
    calls = Calls()
    batch = records(("a", {"n": 1, "order": 7}), ("b", {"n": 2, "order": 7}))
    assert [] == failed(make(idempotency_store, calls, config)({"Records": batch}, lambda_context))
    assert [1] == calls.seen()


# --- order and the checkpoint --------------------------------------------------------------------


@pytest.mark.parametrize("max_concurrency", [1, 16])
def test_one_partition_key_runs_in_sequence_order(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    max_concurrency: int,
) -> None:
    """Records of one key keep their order; keys interleave freely."""
    calls = Calls()
    batch = records(*((key, {"n": n}) for n, key in enumerate("abcabcabcabc")))
    handler = make(idempotency_store, calls, max_concurrency=max_concurrency)
    assert [] == failed(handler({"Records": batch}, lambda_context))
    assert ([0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8, 11]) == (
        calls.seen("a"),
        calls.seen("b"),
        calls.seen("c"),
    )


@pytest.mark.parametrize("max_concurrency", [1, 16])
def test_interleaved_failures_report_from_the_checkpoint_and_the_retry_runs_each_once(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    max_concurrency: int,
) -> None:
    """Keys a, b, c interleave; b fails at 4 and a at 6. Every record from 4 on is reported,
    Lambda's retry from 4 runs each record once in all, in order per key, and the records of c
    that completed past the checkpoint replay."""
    calls = Calls(fail={4, 6})
    batch = records(*((key, {"n": n}) for n, key in enumerate("abcabcabcabc")))
    handler = make(idempotency_store, calls, max_concurrency=max_concurrency)
    response = handler({"Records": batch}, lambda_context)
    assert [sequence(record) for record in batch[4:]] == failed(response)
    assert ([0, 3, 6], [1, 4], [2, 5, 8, 11]) == (
        calls.seen("a"),
        calls.seen("b"),
        calls.seen("c"),
    )

    calls.fail.clear()
    retry = from_checkpoint(batch, response)
    assert 8 == len(retry["Records"])
    assert [] == failed(handler(retry, lambda_context))
    assert ([0, 3, 6, 6, 9], [1, 4, 4, 7, 10], [2, 5, 8, 11]) == (
        calls.seen("a"),
        calls.seen("b"),
        calls.seen("c"),
    )


def test_redelivered_tail_is_read_once_and_replays_without_a_claim(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A fully resent batch costs one batch read: every record replays from it."""
    spy = BatchSpyStore(idempotency_store)
    calls = Calls()
    handler = make(spy, calls)
    batch = records(*((key, {"n": n}) for n, key in enumerate("abab")))
    assert [] == failed(handler({"Records": batch}, lambda_context))
    spy.calls.clear()
    assert [] == failed(handler({"Records": batch}, lambda_context))
    assert {"get_many": 1} == dict(spy.calls)
    assert 4 == len(calls.records)


# --- malformed records and events --------------------------------------------------------------


@pytest.mark.parametrize(
    "breakage",
    [
        lambda r: r["kinesis"].update(data="!!not base64!!"),
        lambda r: r["kinesis"].update(data=17),
        lambda r: r["kinesis"].pop("partitionKey"),
        lambda r: r["kinesis"].pop("sequenceNumber"),
        lambda r: r["kinesis"].update(approximateArrivalTimestamp="yesterday"),
        lambda r: r["kinesis"].update(approximateArrivalTimestamp=1e20),
        lambda r: r.update(eventSourceARN=["arn"]),
    ],
)
def test_malformed_record_fails_on_its_own_and_reports_from_there(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    caplog: pytest.LogCaptureFixture,
    breakage: Any,
) -> None:
    """The broken record is logged and reported (by its eventID's number if need be) with the
    records after it; those before it ran."""
    batch = records(("a", {"n": 0}), ("a", {"n": 1}), ("a", {"n": 2}))
    numbers = [sequence(record) for record in batch]
    breakage(batch[1])
    calls = Calls()
    with caplog.at_level(logging.WARNING, logger="idempotent_lambda"):
        response = make(idempotency_store, calls)({"Records": batch}, lambda_context)
    assert numbers[1:] == failed(response)
    assert [0] == calls.seen()
    assert f"source=kinesis id={numbers[1]} error=MalformedRecordError" in caplog.text


def test_record_with_no_sequence_number_anywhere_fails_the_whole_batch(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Without a number it cannot be reported, so every record is, and none runs."""
    batch = records(("a", {"n": 0}), ("b", {"n": 1}))
    del batch[1]["kinesis"]["sequenceNumber"]
    del batch[1]["eventID"]
    calls = Calls()
    assert [sequence(batch[0])] == failed(make(idempotency_store, calls)({"Records": batch}, None))
    assert [] == calls.seen()


def test_data_that_is_not_json_fails_only_when_the_handler_parses_it(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """``json_data`` raises for the record whose handler asks; raw ``data`` is always there."""
    event = kinesis_event(data=base64.b64decode("AAEC"), partition_key="a")

    @idempotent_kinesis_handler(persistence_store=idempotency_store)
    def handler(record: KinesisRecord, context: Any) -> str:
        assert b"\x00\x01\x02" == record.data
        return str(record.json_data)

    assert [sequence(event["Records"][0])] == failed(handler(event, lambda_context))


@pytest.mark.parametrize("event", [None, [], {}, {"Records": "no"}, {"records": []}])
def test_event_without_records_raises_the_typed_error(
    idempotency_store: InMemoryPersistenceLayer, event: Any
) -> None:
    """An event that is not a batch is not answered with a partial response."""
    with pytest.raises(MalformedEventError, match="kinesis"):
        make(idempotency_store, Calls())(event, None)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    keys=st.lists(st.sampled_from("abcde"), max_size=30),
    fail=st.sets(st.integers(min_value=0, max_value=29)),
)
def test_answer_is_every_record_from_the_first_failure_whatever_the_concurrency(
    keys: list[str], fail: set[int]
) -> None:
    """Whatever fails, 8 lanes report what one lane reports: every record from the first failure."""
    batch = records(*((key, {"n": n}) for n, key in enumerate(keys)))
    answers = [
        failed(
            make(InMemoryPersistenceLayer(), Calls(fail), max_concurrency=c)(
                {"Records": batch}, None
            )
        )
        for c in (1, 8)
    ]
    assert answers[0] == answers[1]
    first = min(fail & set(range(len(keys))), default=len(keys))
    assert [sequence(record) for record in batch[first:]] == answers[1]
