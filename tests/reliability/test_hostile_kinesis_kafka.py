"""Hostile Kinesis and Kafka events: every record fails alone with a typed cause, or the event
is refused with `MalformedEventError`; nothing else escapes, and no payload reaches a log."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idempotent_lambda import IdempotencyConfig, InMemoryPersistenceLayer
from idempotent_lambda.adapters.kafka import KafkaRecord, idempotent_kafka_handler
from idempotent_lambda.adapters.kinesis import (
    KinesisRecord,
    MalformedEventError,
    idempotent_kinesis_handler,
)
from idempotent_lambda.testing import FakeLambdaContext, kafka_event, kinesis_event
from tests.reliability._support import SECRET, outcome_of, watchdog
from tests.reliability.test_hostile_input import TYPED, HandlerError, budget, json_values, mostly

DATA = base64.b64encode(json.dumps({"order_id": 1, "card": SECRET}).encode()).decode()
RAISE = base64.b64encode(b"raise").decode()
encoded = st.sampled_from([DATA, RAISE, "", "!!not base64!!", "AAE="])


def kinesis_handlers() -> list[Any]:
    store = InMemoryPersistenceLayer()
    key = "powertools_json(powertools_base64(kinesis.data)).order_id"
    handlers = []
    for n, config in enumerate([None, IdempotencyConfig(event_key_jmespath=key)]):

        @idempotent_kinesis_handler(persistence_store=store, config=config, key_prefix=f"k-{n}")
        def handle(record: KinesisRecord, context: Any) -> str:
            if record.data == b"raise":
                raise HandlerError("asked to")
            return SECRET

        handlers.append(handle)
    return handlers


def kafka_handlers() -> list[Any]:
    store = InMemoryPersistenceLayer()
    key = "powertools_json(powertools_base64(value)).order_id"
    handlers = []
    for n, config in enumerate([None, IdempotencyConfig(event_key_jmespath=key)]):

        @idempotent_kafka_handler(persistence_store=store, config=config, key_prefix=f"m-{n}")
        def handle(record: KafkaRecord, context: Any) -> str:
            if record.value == b"raise":
                raise HandlerError("asked to")
            return SECRET

        handlers.append(handle)
    return handlers


KINESIS, KAFKA = kinesis_handlers(), kafka_handlers()


def assert_outcome(
    handlers: list[Any], event: Any, caplog: pytest.LogCaptureFixture, identifier: Any
) -> None:
    """Each handler answers with well-formed identifiers and typed causes, or refuses the event."""
    for handle in handlers:
        caplog.clear()
        with watchdog():
            kind, response = outcome_of(lambda h=handle: h(event, FakeLambdaContext(60_000)))
        if kind != "result":
            assert isinstance(response, MalformedEventError), (kind, response)
            continue
        assert all(identifier(f["itemIdentifier"]) for f in response["batchItemFailures"])
        causes = {
            getattr(record, "idempotency_batch", {}).get("error")
            for record in caplog.records
            if getattr(record, "idempotency_batch", None)
        } - {None}
        assert causes <= TYPED | {"HandlerError"}, causes
        assert SECRET not in caplog.text


@st.composite
def kinesis_records(draw: st.DrawFn) -> Any:
    record: dict[str, Any] = kinesis_event()["Records"][0]
    record["kinesis"]["data"] = draw(mostly(encoded, json_values))
    for _ in range(draw(st.integers(0, 3))):
        section, field = draw(
            st.sampled_from(
                [
                    ("kinesis", "partitionKey"),
                    ("kinesis", "sequenceNumber"),
                    ("kinesis", "approximateArrivalTimestamp"),
                    (None, "eventID"),
                    (None, "eventSourceARN"),
                    (None, "kinesis"),
                ]
            )
        )
        target = record if section is None else record[section]
        if isinstance(target, dict):
            target[field] = draw(json_values | st.just("k") | st.just(1e300))
    return record


@budget("kinesis")
@given(
    event=st.fixed_dictionaries({"Records": st.lists(kinesis_records() | json_values, max_size=6)})
    | json_values
)
def test_kinesis_adapter_fails_hostile_records_in_order(
    event: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Any Kinesis event: per-record failures with typed causes, or `MalformedEventError`."""
    assert_outcome(KINESIS, event, caplog, lambda i: isinstance(i, str) and i)


@st.composite
def kafka_records(draw: st.DrawFn) -> Any:
    record: dict[str, Any] = next(iter(kafka_event()["records"].values()))[0]
    record["value"] = draw(mostly(encoded, json_values))
    for _ in range(draw(st.integers(0, 3))):
        field = draw(
            st.sampled_from(
                ["topic", "partition", "offset", "key", "headers", "timestamp", "timestampType"]
            )
        )
        record[field] = draw(
            json_values
            | encoded
            | st.just([{"h": [1, 2]}])
            | st.just([{"h": [300]}])
            | st.integers(-1, 3)
        )
    return record


@budget("kafka")
@given(
    event=st.fixed_dictionaries(
        {
            "eventSource": st.sampled_from(["aws:kafka", "SelfManagedKafka"]),
            "eventSourceArn": mostly(st.just("arn:aws:kafka:us-east-1:1:cluster/c/1"), json_values),
            "bootstrapServers": mostly(st.just("b-1:9092"), json_values),
            "records": st.dictionaries(
                st.sampled_from(["orders-0", "orders-1"]),
                st.lists(kafka_records() | json_values, max_size=4),
                max_size=2,
            )
            | json_values,
        }
    )
    | json_values
)
def test_kafka_adapter_fails_hostile_records_per_partition(
    event: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Any Kafka event: per-record failures with typed causes, or `MalformedEventError`."""

    def well_formed(item: Any) -> bool:
        return (
            isinstance(item, dict)
            and isinstance(item.get("partition"), str)
            and isinstance(item.get("offset"), int)
        )

    assert_outcome(KAFKA, event, caplog, well_formed)
