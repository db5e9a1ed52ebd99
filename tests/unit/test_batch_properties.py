"""Property tests: no batch, however malformed, makes a batch handler raise or misreport."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idempotent_lambda import IdempotencyConfig, InMemoryPersistenceLayer
from idempotent_lambda.adapters.dynamodb_stream import (
    DynamoDBStreamRecord,
    idempotent_stream_handler,
)
from idempotent_lambda.adapters.sqs import MalformedEventError, SQSRecord, idempotent_sqs_handler
from idempotent_lambda.testing import FakeLambdaContext

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STANDARD_ARN = "arn:aws:sqs:us-east-1:123456789012:q"
FIFO_ARN = "arn:aws:sqs:us-east-1:123456789012:q.fifo"
STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/T/stream/2020-01-01T00:00:00.000"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)
ids = st.sampled_from(["", "a", "b", "c", "d", "e"]) | st.text(max_size=6)
bodies = (
    st.text(max_size=20)
    | st.builds(json.dumps, st.fixed_dictionaries({"order_id": json_values}))
    | st.builds(json.dumps, json_values)
)
CONFIGS = [
    IdempotencyConfig(),
    IdempotencyConfig(event_key_jmespath="powertools_json(body).order_id"),
    IdempotencyConfig(
        event_key_jmespath="powertools_json(body).order_id", raise_on_no_idempotency_key=True
    ),
    IdempotencyConfig(event_key_jmespath="messageId", payload_validation_jmespath="attributes.x"),
]


@st.composite
def sqs_records(draw: st.DrawFn, arn: str) -> Any:
    """A well-formed SQS record, one with fields broken or dropped, or anything at all."""
    record: dict[str, Any] = {
        "messageId": draw(ids),
        "receiptHandle": "h",
        "body": draw(bodies),
        "attributes": {
            "ApproximateReceiveCount": "1",
            "MessageGroupId": draw(st.sampled_from("gh")),
        },
        "messageAttributes": {},
        "eventSourceARN": arn,
    }
    kind = draw(st.sampled_from(["valid", "broken", "garbage"]))
    if kind == "garbage":
        return draw(json_values)
    if kind == "broken":
        for field in draw(st.sets(st.sampled_from([*sorted(record), "md5OfBody"]), max_size=3)):
            if draw(st.booleans()):
                record.pop(field, None)
            else:
                record[field] = draw(json_values)
    return record


@st.composite
def stream_records(draw: st.DrawFn) -> Any:
    """A well-formed stream record, one with fields broken or dropped, or anything at all."""
    number = draw(st.integers(min_value=0, max_value=5))
    record: dict[str, Any] = {
        "eventID": f"e{number}",
        "eventName": draw(st.sampled_from(["INSERT", "MODIFY", "REMOVE"])),
        "eventSourceARN": STREAM_ARN,
        "dynamodb": {
            "Keys": {"id": {"N": str(number)}},
            "NewImage": {"id": {"N": str(number)}, "v": {"S": draw(st.text(max_size=5))}},
            "SequenceNumber": draw(ids),
            "StreamViewType": "NEW_IMAGE",
        },
    }
    kind = draw(st.sampled_from(["valid", "broken", "broken_change", "garbage"]))
    if kind == "garbage":
        return draw(json_values)
    target = record if kind == "broken" else record["dynamodb"]
    if kind != "valid":
        for field in draw(st.sets(st.sampled_from(sorted(target)), max_size=3)):
            if draw(st.booleans()):
                target.pop(field, None)
            else:
                target[field] = draw(json_values)
    return record


def sqs_identifier(record: Any) -> str | None:
    """Return what Lambda would accept as the record's itemIdentifier."""
    if isinstance(record, Mapping):
        message_id = record.get("messageId")
        if isinstance(message_id, str) and message_id:
            return message_id
    return None


def stream_identifier(record: Any) -> str | None:
    """Return the record's sequence number, if it has a usable one."""
    if isinstance(record, Mapping) and isinstance(record.get("dynamodb"), Mapping):
        sequence = record["dynamodb"].get("SequenceNumber")
        if isinstance(sequence, str) and sequence:
            return sequence
    return None


def check_report(records: list[Any], reported: list[str], identify: Any, *, ordered: bool) -> None:
    """Assert the reported failures are well-formed for this batch."""
    identifiers = [identify(record) for record in records]
    known = [i for i in identifiers if i is not None]
    assert len(set(reported)) == len(reported)
    if len(known) < len(identifiers):
        assert list(dict.fromkeys(known)) == reported
        return
    assert set(reported) <= set(known)
    if len(set(known)) == len(known):
        assert sorted(reported, key=known.index) == reported
    if ordered and reported:
        suffixes = [set(known[k:]) for k in range(len(known))]
        assert set(reported) in suffixes


def check_fifo_groups(records: list[Any], reported: list[str]) -> None:
    """Assert that, within each message group, the reported records are the group's tail."""
    ids = [sqs_identifier(record) for record in records]
    if None in ids or len(set(ids)) < len(ids):
        return
    groups: dict[Any, list[str]] = {}
    for record, identifier in zip(records, ids, strict=True):
        attributes = record.get("attributes")
        group = attributes.get("MessageGroupId") if isinstance(attributes, Mapping) else None
        groups.setdefault(group if isinstance(group, str) else identifier, []).append(identifier)
    for members in groups.values():
        tail = [identifier for identifier in members if identifier in reported]
        assert members[len(members) - len(tail) :] == tail


def flaky(record: Any, context: Any) -> str:
    """A record handler that fails some records."""
    text = record.body if isinstance(record, SQSRecord) else str(record.new_image)
    if "x" in text or "1" in text:
        raise RuntimeError("refused")
    return "ok"


@SETTINGS
@given(
    records=st.lists(st.sampled_from([STANDARD_ARN, FIFO_ARN]).flatmap(sqs_records), max_size=8),
    config=st.sampled_from(CONFIGS),
    max_concurrency=st.sampled_from([1, 4]),
)
def test_sqs_batches_never_raise_and_report_only_their_own_ids(
    records: list[Any], config: IdempotencyConfig, max_concurrency: int
) -> None:
    """Any list of records: a response, failures drawn from the batch's ids, in batch order."""
    store = InMemoryPersistenceLayer()
    seen: list[Any] = []

    def record_handler(record: SQSRecord, context: Any) -> str:
        seen.append(record)
        return flaky(record, context)

    handler = idempotent_sqs_handler(
        persistence_store=store, config=config, max_concurrency=max_concurrency
    )(record_handler)
    response = handler({"Records": records}, FakeLambdaContext(30_000))
    reported = [failure["itemIdentifier"] for failure in response["batchItemFailures"]]
    check_report(records, reported, sqs_identifier, ordered=False)
    if all(isinstance(r, Mapping) and r.get("eventSourceARN") == FIFO_ARN for r in records):
        check_fifo_groups(records, reported)
    assert all(isinstance(record, SQSRecord) for record in seen)


@SETTINGS
@given(records=st.lists(stream_records(), max_size=8), config=st.sampled_from(CONFIGS[:1]))
def test_stream_batches_never_raise_and_report_a_suffix(
    records: list[Any], config: IdempotencyConfig
) -> None:
    """Any list of stream records: the failures are exactly the batch from some record on."""
    store = InMemoryPersistenceLayer()
    handler = idempotent_stream_handler(persistence_store=store, config=config)(flaky)
    response = handler({"Records": records}, FakeLambdaContext(30_000))
    reported = [failure["itemIdentifier"] for failure in response["batchItemFailures"]]
    check_report(records, reported, stream_identifier, ordered=True)


@SETTINGS
@given(event=json_values | st.fixed_dictionaries({"Records": json_values}))
def test_arbitrary_events_either_answer_or_raise_the_typed_error(event: Any) -> None:
    """Only an event without a Records list raises, and then only `MalformedEventError`."""
    store = InMemoryPersistenceLayer()
    sqs = idempotent_sqs_handler(persistence_store=store)(flaky)
    stream = idempotent_stream_handler(persistence_store=store)(flaky)
    is_batch = isinstance(event, Mapping) and isinstance(event.get("Records"), list)
    for handler in (sqs, stream):
        try:
            response = handler(event, None)
        except MalformedEventError:
            assert not is_batch
        else:
            assert is_batch
            assert isinstance(response["batchItemFailures"], list)


def test_typed_records_are_what_the_stream_handler_receives() -> None:
    """Stream record handlers get `DynamoDBStreamRecord` instances."""
    seen: list[Any] = []
    handler = idempotent_stream_handler(persistence_store=InMemoryPersistenceLayer())(
        lambda record, context: seen.append(record)
    )
    record = {
        "eventID": "1",
        "eventName": "INSERT",
        "dynamodb": {"Keys": {"id": {"S": "a"}}, "SequenceNumber": "1"},
    }
    assert {"batchItemFailures": []} == handler({"Records": [record]}, None)
    assert [DynamoDBStreamRecord] == [type(r) for r in seen]
