"""The Kafka adapter: typed records, Lambda's Kafka answer, offset order per partition."""

from __future__ import annotations

import base64
import copy
import datetime
import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idempotent_lambda import IdempotencyConfig, InMemoryPersistenceLayer
from idempotent_lambda._identity import digest
from idempotent_lambda.adapters.kafka import (
    KafkaRecord,
    MalformedEventError,
    idempotent_kafka_handler,
)
from idempotent_lambda.testing import FakeLambdaContext, KafkaRecordFields, kafka_event
from tests.unit._doubles import BatchSpyStore, SpyStore

PREFIX = "shipments"
CLUSTER = "arn:aws:kafka:us-east-1:123456789012:cluster/orders/abc-1"


def event_of(*values: tuple[int, Any], topic: str = "orders", **options: Any) -> dict[str, Any]:
    """Return an MSK event with one record per ``(partition, value)``, offsets increasing."""
    fields = [KafkaRecordFields(partition=partition, value=value) for partition, value in values]
    return kafka_event(records=fields, topic=topic, cluster_arn=CLUSTER, **options)


def raw_records(event: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Return the event's records, partition by partition."""
    return [record for records in event["records"].values() for record in records]


def item(record: Mapping[str, Any]) -> dict[str, Any]:
    """Return a raw record's ``itemIdentifier`` as Lambda wants it for Kafka."""
    return {"partition": f"{record['topic']}-{record['partition']}", "offset": record["offset"]}


def failed(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Return the reported item identifiers, in order."""
    return [failure["itemIdentifier"] for failure in response["batchItemFailures"]]


def from_failed_offsets(event: dict[str, Any], response: Mapping[str, Any]) -> dict[str, Any]:
    """Return what Lambda sends next: each reported partition from its lowest reported offset."""
    lowest: dict[str, int] = {}
    for identifier in failed(response):
        partition = identifier["partition"]
        lowest[partition] = min(identifier["offset"], lowest.get(partition, identifier["offset"]))
    retry = copy.deepcopy(event)
    retry["records"] = {
        name: [r for r in records if r["offset"] >= lowest[name]]
        for name, records in event["records"].items()
        if name in lowest
    }
    return retry


class Calls:
    """A record handler that remembers ``(partition, value["n"])`` and fails chosen ``n``."""

    def __init__(self, fail: set[int] | None = None) -> None:
        self.fail = fail or set()
        self.records: list[KafkaRecord] = []
        self._lock = threading.Lock()

    def seen(self, partition: int | None = None) -> list[int]:
        """Return the ``n`` handled (in ``partition``), in the order they ran."""
        with self._lock:
            found = [r for r in self.records if partition in (None, r.partition)]
        return [r.json_value["n"] for r in found]

    def __call__(self, record: KafkaRecord, context: Any) -> int:
        with self._lock:
            self.records.append(record)
        if record.json_value["n"] in self.fail:
            raise RuntimeError("downstream refused")
        return int(record.json_value["n"])


def make(store: Any, calls: Calls, config: IdempotencyConfig | None = None, **options: Any) -> Any:
    """Return the batch handler of ``calls``."""
    return idempotent_kafka_handler(
        persistence_store=store, config=config, key_prefix=PREFIX, **options
    )(calls)


# --- typed records and the answer --------------------------------------------------------------


def test_record_handler_receives_the_decoded_record(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Key, value and headers are decoded; topic, partition, offset and time are there."""
    event = kafka_event(
        value={"n": 1, "card": "4111"},
        key="order-7",
        headers=[("trace", "t-1"), ("bin", b"\x00\xff"), ("trace", "t-2")],
        partition=3,
        offset=42,
        timestamp=1_700_000_000_500,
    )
    calls = Calls()
    assert [] == failed(make(idempotency_store, calls)(event, lambda_context))
    (record,) = calls.records
    assert ("orders", 3, 42) == (record.topic, record.partition, record.offset)
    assert datetime.datetime(2023, 11, 14, 22, 13, 20, 500000, tzinfo=datetime.timezone.utc) == (
        record.timestamp
    )
    assert "CREATE_TIME" == record.timestamp_type
    assert (b"order-7", {"n": 1, "card": "4111"}) == (record.key, record.json_value)
    assert (("trace", b"t-1"), ("bin", b"\x00\xff"), ("trace", b"t-2")) == record.headers
    assert (b"t-2", None) == (record.header("trace"), record.header("missing"))
    assert raw_records(event)[0] is record.raw
    assert "4111" not in repr(record)


def test_tombstone_has_no_value_and_no_key_is_none(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A record without key or value arrives with None; parsing its value raises."""
    event = kafka_event()
    del raw_records(event)[0]["value"]
    seen: list[tuple[Any, Any]] = []

    @idempotent_kafka_handler(persistence_store=idempotency_store)
    def handler(record: KafkaRecord, context: Any) -> None:
        seen.append((record.key, record.value))
        with pytest.raises(ValueError, match="tombstone"):
            record.json_value  # noqa: B018 - the property raises

    assert [] == failed(handler(event, lambda_context))
    assert [(None, None)] == seen


def test_failures_are_answered_in_lambdas_kafka_shape(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Each failed record is ``{"partition": "<topic>-<partition>", "offset": <int>}``."""
    event = event_of((0, {"n": 0}), (1, {"n": 1}), topic="orders.v2")
    response = make(idempotency_store, Calls(fail={1}))(event, lambda_context)
    offset = raw_records(event)[1]["offset"]
    assert {
        "batchItemFailures": [{"itemIdentifier": {"partition": "orders.v2-1", "offset": offset}}]
    } == (response)


def test_default_key_is_the_cluster_topic_partition_and_offset(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The claim hashes the cluster ARN (the scope) with the record's position."""
    spy = SpyStore(idempotency_store)
    event = event_of((2, {"n": 0}))
    make(spy, Calls())(event, lambda_context)
    offset = raw_records(event)[0]["offset"]
    material = {"source": CLUSTER, "key": {"topic": "orders", "partition": 2, "offset": offset}}
    assert [f"{PREFIX}#{digest(IdempotencyConfig(), material)}"] == [
        claim.idempotency_key for claim in spy.claims
    ]


def test_self_managed_kafka_is_scoped_by_its_brokers(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Without an ARN the brokers name the cluster: one position on two clusters runs twice."""
    calls = Calls()
    handler = make(idempotency_store, calls)
    event = event_of((0, {"n": 0}))
    for brokers in ("kafka-1.example:9092", "kafka-1.example:9092", "kafka-9.example:9092"):
        self_managed = {**event, "eventSource": "SelfManagedKafka", "bootstrapServers": brokers}
        del self_managed["eventSourceArn"]
        assert [] == failed(handler(self_managed, lambda_context))
    assert [0, 0] == calls.seen()


def test_business_key_from_the_decoded_value_runs_two_records_once(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """``event_key_jmespath`` reads the raw record: base64 and JSON through the built-ins."""
    config = IdempotencyConfig(event_key_jmespath="powertools_json(powertools_base64(value)).order")
    calls = Calls()
    event = event_of((0, {"n": 0, "order": 7}), (1, {"n": 1, "order": 7}))
    assert [] == failed(make(idempotency_store, calls, config)(event, lambda_context))
    assert [0] == calls.seen()


# --- order per partition -----------------------------------------------------------------------


@pytest.mark.parametrize("max_concurrency", [1, 16])
def test_a_failure_stops_its_partition_and_the_retry_runs_each_record_once(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    max_concurrency: int,
) -> None:
    """Partition 0 fails at 3: 3 and its later records are reported, 1 and 2 finish. Lambda's
    retry of partition 0 from 3 runs every record once in all, in offset order."""
    event = event_of(*((n % 3, {"n": n}) for n in range(12)))
    calls = Calls(fail={3})
    handler = make(idempotency_store, calls, max_concurrency=max_concurrency)
    response = handler(event, lambda_context)
    partition_0 = event["records"]["orders-0"]
    assert [item(record) for record in partition_0[1:]] == failed(response)
    assert ([0, 3], [1, 4, 7, 10], [2, 5, 8, 11]) == (calls.seen(0), calls.seen(1), calls.seen(2))

    calls.fail.clear()
    retry = from_failed_offsets(event, response)
    assert ["orders-0"] == list(retry["records"])
    assert [] == failed(handler(retry, lambda_context))
    assert [0, 3, 3, 6, 9] == calls.seen(0)


def test_redelivered_batch_is_read_once_and_replays_without_a_claim(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Kafka has no first-delivery hint: a batch is read at once, and a resent one replays."""
    spy = BatchSpyStore(idempotency_store)
    calls = Calls()
    handler = make(spy, calls)
    event = event_of(*((n % 2, {"n": n}) for n in range(4)))
    assert [] == failed(handler(event, lambda_context))
    spy.calls.clear()
    assert [] == failed(handler(event, lambda_context))
    assert {"get_many": 1} == dict(spy.calls)
    assert 4 == len(calls.records)


# --- malformed records and events --------------------------------------------------------------


@pytest.mark.parametrize(
    "breakage",
    [
        lambda r: r.update(value="!!not base64!!"),
        lambda r: r.update(key=17),
        lambda r: r.update(headers=[{"h": [1, 300]}]),
        lambda r: r.update(headers=[{"h": 5}]),
        lambda r: r.update(headers={"h": [1]}),
        lambda r: r.update(timestamp="yesterday"),
        lambda r: r.update(timestamp=1e30),
        lambda r: r.update(timestampType=1),
    ],
)
def test_malformed_record_fails_with_the_rest_of_its_partition_only(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    caplog: pytest.LogCaptureFixture,
    breakage: Any,
) -> None:
    """The broken record is logged and reported with its partition's later records."""
    event = event_of((0, {"n": 0}), (0, {"n": 1}), (0, {"n": 2}), (1, {"n": 3}))
    partition_0 = event["records"]["orders-0"]
    breakage(partition_0[1])
    calls = Calls()
    with caplog.at_level(logging.WARNING, logger="idempotent_lambda"):
        response = make(idempotency_store, calls)(event, lambda_context)
    assert [item(record) for record in partition_0[1:]] == failed(response)
    assert [0, 3] == sorted(calls.seen())
    assert f"id=orders-0:{partition_0[1]['offset']} error=MalformedRecordError" in caplog.text


@pytest.mark.parametrize("field", ["topic", "partition", "offset"])
def test_record_without_a_position_fails_the_whole_batch(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext, field: str
) -> None:
    """A record that cannot be named in the answer: every other one is reported, none runs."""
    event = event_of((0, {"n": 0}), (1, {"n": 1}))
    first, second = raw_records(event)
    second[field] = None
    calls = Calls()
    assert [item(first)] == failed(make(idempotency_store, calls)(event, None))
    assert [] == calls.seen()


@pytest.mark.parametrize(
    "event", [None, [], {}, {"Records": []}, {"records": []}, {"records": {"orders-0": {}}}]
)
def test_event_without_a_records_map_raises_the_typed_error(
    idempotency_store: InMemoryPersistenceLayer, event: Any
) -> None:
    """An event that is not a Kafka batch is not answered with a partial response."""
    with pytest.raises(MalformedEventError, match="kafka"):
        make(idempotency_store, Calls())(event, None)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    partitions=st.lists(st.integers(min_value=0, max_value=3), max_size=30),
    fail=st.sets(st.integers(min_value=0, max_value=29)),
)
def test_answer_is_each_partition_from_its_first_failure_whatever_the_concurrency(
    partitions: list[int], fail: set[int]
) -> None:
    """Whatever fails, 8 lanes report what one lane reports: per partition, from its first
    failure on; partitions without a failure are not reported."""
    event = event_of(*((p, {"n": n}) for n, p in enumerate(partitions)))
    answers = [
        failed(make(InMemoryPersistenceLayer(), Calls(fail), max_concurrency=c)(event, None))
        for c in (1, 8)
    ]
    assert answers[0] == answers[1]
    expected = []
    for records in event["records"].values():
        ns = [json.loads(base64.b64decode(r["value"]))["n"] for r in records]
        first = next((i for i, n in enumerate(ns) if n in fail), len(ns))
        expected.extend(item(r) for r in records[first:])
    assert expected == answers[1]
