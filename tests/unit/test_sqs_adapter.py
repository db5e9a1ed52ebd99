"""The SQS adapter: typed records, keys, replays and the standard/FIFO partial-batch rules."""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyConfig,
    IdempotencyConfigError,
    IdempotencyRecord,
    IdempotencyUnstorableResultError,
    InMemoryPersistenceLayer,
    Status,
)
from idempotent_lambda._identity import digest
from idempotent_lambda.adapters.sqs import (
    SQSMessageAttribute,
    SQSRecord,
    idempotent_sqs_handler,
)
from idempotent_lambda.testing import FakeLambdaContext
from tests.unit._doubles import Decisions, SpyStore

EVENTS = Path(__file__).parents[1] / "events"
PREFIX = "orders"
STANDARD_ARN = "arn:aws:sqs:us-east-1:123456789012:orders"
FIFO_ARN = "arn:aws:sqs:us-east-1:123456789012:orders.fifo"


def load(name: str) -> dict[str, Any]:
    """Return a stored event fixture."""
    return json.loads((EVENTS / name).read_text())  # type: ignore[no-any-return]


def message(
    message_id: str, body: Any = None, *, arn: str = STANDARD_ARN, group: str | None = None
) -> dict[str, Any]:
    """Return an SQS record shaped like the SAM-generated one, with this id and body."""
    record: dict[str, Any] = copy.deepcopy(load("sqs_receive_message.json")["Records"][0])
    record["messageId"] = message_id
    record["eventSourceARN"] = arn
    if body is not None:
        record["body"] = body if isinstance(body, str) else json.dumps(body)
    if group is not None:
        record["attributes"]["MessageGroupId"] = group
        record["attributes"]["MessageDeduplicationId"] = message_id
    return record


def batch(*records: dict[str, Any]) -> dict[str, Any]:
    """Return an SQS event holding ``records``."""
    return {"Records": list(records)}


def failed(response: Mapping[str, Any]) -> list[str]:
    """Return the reported identifiers, in order."""
    return [failure["itemIdentifier"] for failure in response["batchItemFailures"]]


def key_of(
    material: Any, config: IdempotencyConfig | None = None, *, arn: str = STANDARD_ARN
) -> str:
    """Return the stored key of a record's ``material`` from queue ``arn``, under PREFIX."""
    return f"{PREFIX}#{digest(config or IdempotencyConfig(), {'source': arn, 'key': material})}"


@dataclasses.dataclass
class Receipt:
    """A dataclass result."""

    order: int


class Calls:
    """A record handler that remembers what it saw and fails the message ids it is told to."""

    def __init__(self, fail: set[str] | None = None) -> None:
        self.fail = fail or set()
        self.seen: list[str] = []
        self.records: list[SQSRecord] = []
        self._lock = threading.Lock()

    def __call__(self, record: SQSRecord, context: Any) -> dict[str, Any]:
        with self._lock:
            self.seen.append(record.message_id)
            self.records.append(record)
        if record.message_id in self.fail:
            raise RuntimeError(f"downstream refused {record.body}")
        return {"handled": record.message_id}


def make(store: Any, calls: Calls, config: IdempotencyConfig | None = None, **options: Any) -> Any:
    """Return the batch handler of ``calls``."""
    return idempotent_sqs_handler(
        persistence_store=store, config=config, key_prefix=PREFIX, **options
    )(calls)


# --- typed records -----------------------------------------------------------------------------


def test_aws_example_event_is_processed_and_nothing_is_reported(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The documented standard-queue event runs both records and reports no failure."""
    calls = Calls()
    response = make(idempotency_store, calls)(load("sqs_standard.json"), lambda_context)
    assert {"batchItemFailures": []} == response
    assert [
        "059f36b4-87a3-44ab-83d2-661975830a7d",
        "2e1424d4-f796-459a-8184-9c92662be6da",
    ] == sorted(calls.seen)


def test_record_handler_receives_a_typed_record_with_the_raw_dict(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Message id, body, attributes, message attributes and the raw record are exposed."""
    calls = Calls()
    event = load("sqs_standard.json")
    make(idempotency_store, calls)(event, lambda_context)
    # The two records run on parallel lanes: pick the first record by id, not by call order.
    (record,) = [r for r in calls.records if r.message_id == event["Records"][0]["messageId"]]
    assert "059f36b4-87a3-44ab-83d2-661975830a7d" == record.message_id
    assert "Test message." == record.body
    assert "1545082649183" == record.attributes["SentTimestamp"]
    assert 1 == record.approximate_receive_count
    assert {"myAttribute": SQSMessageAttribute("String", "myValue")} == record.message_attributes
    assert record.message_group_id is None
    assert record.message_deduplication_id is None
    assert not record.queue_is_fifo
    assert event["Records"][0] is record.raw
    assert "Test message." not in repr(record)


def test_binary_message_attribute_is_decoded_and_json_body_parsed(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A base64 binary attribute arrives as bytes; the JSON body parses to Python."""
    calls = Calls()
    make(idempotency_store, calls)(load("sqs_json_body.json"), lambda_context)
    record = calls.records[0]
    assert (
        SQSMessageAttribute("Number", "100", b"base64Str") == record.message_attributes["testAttr"]
    )
    assert {"order_id": "o-1001", "amount": "19.99"} == record.json_body
    assert record.json_body is record.json_body
    assert 3 == record.approximate_receive_count


def test_fifo_record_exposes_group_and_deduplication_ids(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The documented FIFO event carries its group and deduplication ids."""
    calls = Calls()
    make(idempotency_store, calls)(load("sqs_fifo.json"), lambda_context)
    record = calls.records[0]
    assert ("1", "1") == (record.message_group_id, record.message_deduplication_id)
    assert record.queue_is_fifo


def test_non_json_body_fails_only_when_the_handler_asks_for_json(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """``json_body`` on a plain-text body raises inside the handler: that record fails."""

    @idempotent_sqs_handler(persistence_store=idempotency_store)
    def handler(record: SQSRecord, context: Any) -> Any:
        return record.json_body

    event = batch(message("m-1", "not json"), message("m-2", {"ok": True}))
    assert ["m-1"] == failed(handler(event, lambda_context))


# --- keys, replays, stored results -------------------------------------------------------------


def test_redelivered_batch_replays_every_message_with_one_store_call_each(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """First delivery: 2 calls per message; redelivery: 1 call per message, no handler run."""
    spy = SpyStore(idempotency_store)
    calls = Calls()
    handler = make(spy, calls)
    event = batch(*(message(f"m-{n}", {"n": n}) for n in range(5)))
    assert [] == failed(handler(event, lambda_context))
    assert 10 == spy.total_calls
    assert [] == failed(handler(copy.deepcopy(event), lambda_context))
    assert 15 == spy.total_calls
    assert [f"m-{n}" for n in range(5)] == sorted(calls.seen)


def test_default_key_is_the_queue_and_the_message_id(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Two messages with the same body but different ids both run; keys hash queue and id."""
    spy = SpyStore(idempotency_store)
    calls = Calls()
    make(spy, calls)(batch(message("m-1", "same"), message("m-2", "same")), lambda_context)
    assert ["m-1", "m-2"] == sorted(calls.seen)
    assert sorted([key_of("m-1"), key_of("m-2")]) == sorted(
        claim.idempotency_key for claim in spy.claims
    )


def test_business_key_runs_two_messages_with_one_order_once(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
) -> None:
    """Sequentially, the second message with the same order id replays the first's result."""
    config = IdempotencyConfig(
        event_key_jmespath="powertools_json(body).order_id", decision_hook=decisions
    )
    calls = Calls()
    event = batch(message("m-1", {"order_id": 7}), message("m-2", {"order_id": 7}))
    assert [] == failed(make(idempotency_store, calls, config)(event, lambda_context))
    assert ["m-1"] == calls.seen
    assert ["CLAIMED", "REPLAYED"] == decisions.outcomes


def test_one_order_id_from_two_queues_runs_once_per_queue(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Tenant A's order 1001 does not acknowledge tenant B's: the business key is per queue."""
    config = IdempotencyConfig(event_key_jmespath="powertools_json(body).order_id")
    calls = Calls()
    handler = make(idempotency_store, calls, config)
    tenant_b = "arn:aws:sqs:us-east-1:210987654321:orders"
    assert [] == failed(handler(batch(message("a-1", {"order_id": 1001})), lambda_context))
    event = batch(message("b-1", {"order_id": 1001}, arn=tenant_b))
    assert [] == failed(handler(event, lambda_context))
    assert ["a-1", "b-1"] == calls.seen
    assert idempotency_store.get(key_of(1001, config)) is not None
    assert idempotency_store.get(key_of(1001, config, arn=tenant_b)) is not None


def test_shared_source_scope_runs_one_order_id_once_across_queues(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """``source_scope="shared"`` keys on the business key alone, whatever the queue."""
    config = IdempotencyConfig(event_key_jmespath="powertools_json(body).order_id")
    calls = Calls()
    handler = idempotent_sqs_handler(
        persistence_store=idempotency_store, config=config, key_prefix=PREFIX, source_scope="shared"
    )(calls)
    other = "arn:aws:sqs:eu-west-1:123456789012:orders-replica"
    event = batch(message("a-1", {"order_id": 1001}), message("b-1", {"order_id": 1001}, arn=other))
    assert [] == failed(handler(event, lambda_context))
    assert ["a-1"] == calls.seen
    assert idempotency_store.get(f"{PREFIX}#{digest(config, 1001)}") is not None


@pytest.mark.parametrize("scope", ["queue", "", None, 1])
def test_unknown_source_scope_is_refused_at_decoration(
    idempotency_store: InMemoryPersistenceLayer, scope: Any
) -> None:
    """Only "source", "shared" and "powertools" are scopes."""
    with pytest.raises(IdempotencyConfigError, match="source_scope"):
        idempotent_sqs_handler(persistence_store=idempotency_store, source_scope=scope)


def test_powertools_source_scope_keys_the_whole_record_without_a_key_expression(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """``source_scope="powertools"`` hashes what Powertools' record handler hashes."""
    calls = Calls()
    handler = idempotent_sqs_handler(
        persistence_store=idempotency_store, key_prefix=PREFIX, source_scope="powertools"
    )(calls)
    event = batch(message("a-1", {"order_id": 1001}))
    assert [] == failed(handler(event, lambda_context))
    record = event["Records"][0]
    assert idempotency_store.get(f"{PREFIX}#{digest(IdempotencyConfig(), record)}") is not None


def test_powertools_source_scope_needs_powertools_record_format(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """Powertools' keys exist only in Powertools' record format."""
    with pytest.raises(IdempotencyConfigError, match='record_format="powertools"'):
        idempotent_sqs_handler(
            persistence_store=idempotency_store,
            config=IdempotencyConfig(record_format="native"),
            source_scope="powertools",
        )


def test_handler_return_value_is_what_is_stored(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The record handler's result is the stored (and replayed) result."""
    make(idempotency_store, Calls())(batch(message("m-1")), lambda_context)
    stored = idempotency_store.get(key_of("m-1"))
    assert stored is not None
    assert Status.COMPLETED is stored.status
    assert {"handled": "m-1"} == stored.response_json_as_dict()


def test_dataclass_result_replays_as_an_instance(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The serializer comes from the record handler's return annotation."""
    replayed: list[Any] = []

    def hook(response: Any, record: IdempotencyRecord) -> Any:
        replayed.append(response)
        return response

    config = IdempotencyConfig(
        event_key_jmespath="powertools_json(body).order_id", response_hook=hook
    )

    @idempotent_sqs_handler(persistence_store=idempotency_store, config=config)
    def handler(record: SQSRecord, context: Any) -> Receipt:
        return Receipt(order=record.json_body["order_id"])

    event = batch(message("m-1", {"order_id": 3}), message("m-2", {"order_id": 3}))
    assert [] == failed(handler(event, lambda_context))
    assert [Receipt(order=3)] == replayed


def test_key_prefix_defaults_to_function_name_module_and_qualname(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without ``key_prefix`` the key starts with the record handler's default prefix."""
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "orders-fn")
    spy = SpyStore(idempotency_store)

    @idempotent_sqs_handler(persistence_store=spy)
    def process(record: SQSRecord, context: Any) -> None:
        return None

    process(batch(message("m-1")), lambda_context)
    expected = f"orders-fn.{__name__}.{process.__qualname__}#"
    assert spy.claims[0].idempotency_key.startswith(expected)


def test_payload_validation_fails_a_reused_key_with_a_different_payload(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Same business key, different validated body: the second record is reported failed."""
    config = IdempotencyConfig(
        event_key_jmespath="powertools_json(body).order_id",
        payload_validation_jmespath="powertools_json(body).amount",
    )
    calls = Calls()
    event = batch(
        message("m-1", {"order_id": 1, "amount": 5}), message("m-2", {"order_id": 1, "amount": 6})
    )
    assert ["m-2"] == failed(make(idempotency_store, calls, config)(event, lambda_context))
    assert ["m-1"] == calls.seen


# --- standard queues ---------------------------------------------------------------------------


def test_standard_queue_attempts_every_record_and_reports_each_failure(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Failures are reported one by one; records after a failure still run."""
    calls = Calls(fail={"m-1", "m-3"})
    event = batch(*(message(f"m-{n}") for n in range(5)))
    assert ["m-1", "m-3"] == failed(make(idempotency_store, calls)(event, lambda_context))
    assert [f"m-{n}" for n in range(5)] == sorted(calls.seen)


def test_redelivery_runs_only_the_records_that_failed(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A failed record's claim is released, so its redelivery runs; the others replay."""
    calls = Calls(fail={"m-2"})
    handler = make(idempotency_store, calls)
    event = batch(*(message(f"m-{n}") for n in range(4)))
    assert ["m-2"] == failed(handler(event, lambda_context))
    calls.fail.clear()
    assert [] == failed(handler(event, lambda_context))
    assert ["m-0", "m-1", "m-2", "m-2", "m-3"] == sorted(calls.seen)


def test_record_in_progress_elsewhere_is_reported_failed(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
) -> None:
    """A message whose key another invocation holds fails; the other records run."""
    now = idempotency_store.clock.now_ms()
    holder = IdempotencyRecord(
        idempotency_key=key_of("m-1"),
        status=Status.IN_PROGRESS,
        expiry_timestamp=now // 1000 + 3600,
        in_progress_expiry_timestamp=now + 60_000,
        owner="another-invocation",
    )
    assert idempotency_store.claim(holder, now_ms=now, lease_cutoff_ms=now).claimed
    calls = Calls()
    config = IdempotencyConfig(decision_hook=decisions)
    event = batch(message("m-0"), message("m-1"), message("m-2"))
    assert ["m-1"] == failed(make(idempotency_store, calls, config)(event, lambda_context))
    assert ["m-0", "m-2"] == sorted(calls.seen)
    assert "IN_PROGRESS" in decisions.outcomes


def test_malformed_record_fails_alone_and_is_logged_without_its_body(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A record without a string body fails with a clear line; the batch goes on."""
    broken = message("m-1", "secret-card-4111")
    broken["body"] = {"not": "a string"}
    bad_attribute = message("m-2")
    bad_attribute["messageAttributes"] = {"x": {"dataType": "Binary", "binaryValue": "%%%"}}
    calls = Calls()
    event = batch(message("m-0"), broken, bad_attribute, message("m-3"))
    with caplog.at_level(logging.INFO, logger="idempotent_lambda"):
        response = make(idempotency_store, calls)(event, lambda_context)
    assert ["m-1", "m-2"] == failed(response)
    assert ["m-0", "m-3"] == sorted(calls.seen)
    # Each record is a lane of its own, so the two lines may come in either order.
    lines = sorted(r.getMessage() for r in caplog.records if r.name == "idempotent_lambda.batch")
    assert [
        "batch record failed: source=sqs id=m-1 error=MalformedRecordError",
        "batch record failed: source=sqs id=m-2 error=MalformedRecordError",
    ] == lines


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("attributes", ["not", "a", "map"]),
        ("attributes", {"ApproximateReceiveCount": 1}),
        ("eventSourceARN", 42),
        ("messageAttributes", "nope"),
        ("messageAttributes", {"a": "not a map"}),
        ("messageAttributes", {"a": {"stringValue": "no data type"}}),
        ("messageAttributes", {"a": {"dataType": "Binary", "binaryValue": 7}}),
    ],
)
def test_each_malformed_field_fails_the_record(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    field: str,
    value: Any,
) -> None:
    """Every field SQS always sends is type-checked before the handler sees the record."""
    record = message("m-1")
    record[field] = value
    calls = Calls()
    assert ["m-1"] == failed(make(idempotency_store, calls)(batch(record), lambda_context))
    assert [] == calls.seen


def test_handler_exception_message_never_reaches_the_warning_log(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The failure line names the id and the error class only, not the exception text."""
    calls = Calls(fail={"m-1"})
    with caplog.at_level(logging.WARNING, logger="idempotent_lambda"):
        make(idempotency_store, calls)(batch(message("m-1", "secret-card-4111")), lambda_context)
    assert "secret-card-4111" not in caplog.text
    assert "batch record failed: source=sqs id=m-1 error=RuntimeError" in caplog.text


def test_missing_business_key_is_a_failure_when_keys_are_required(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """``raise_on_no_idempotency_key``: a message without the key fails; others run."""
    config = IdempotencyConfig(
        event_key_jmespath="powertools_json(body).order_id", raise_on_no_idempotency_key=True
    )
    calls = Calls()
    event = batch(message("m-1", {"other": 1}), message("m-2", {"order_id": 2}))
    assert ["m-1"] == failed(make(idempotency_store, calls, config)(event, lambda_context))
    assert ["m-2"] == calls.seen


def test_missing_business_key_runs_without_idempotency_by_default(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
) -> None:
    """Keys optional: the message runs (SKIPPED decision) and is not reported."""
    config = IdempotencyConfig(
        event_key_jmespath="powertools_json(body).order_id", decision_hook=decisions
    )
    calls = Calls()
    handler = make(idempotency_store, calls, config)
    assert [] == failed(handler(batch(message("m-1", {"other": 1})), lambda_context))
    assert [] == failed(handler(batch(message("m-1", {"other": 1})), lambda_context))
    assert ["m-1", "m-1"] == calls.seen
    assert ["SKIPPED", "SKIPPED"] == decisions.outcomes
    assert 0 == len(idempotency_store)


def test_key_expression_that_cannot_evaluate_fails_the_record(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """``powertools_json`` on a body that is not JSON is a key error for that record."""
    config = IdempotencyConfig(event_key_jmespath="powertools_json(body).order_id")
    calls = Calls()
    event = batch(message("m-1", "plain text"), message("m-2", {"order_id": 1}))
    assert ["m-1"] == failed(make(idempotency_store, calls, config)(event, lambda_context))


def test_store_failure_fails_every_record_without_running_any(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The store refusing claims fails each record; the batch handler does not raise."""
    calls = Calls()
    handler = make(SpyStore(idempotency_store, fail={"claim"}), calls)
    assert ["m-1", "m-2"] == failed(handler(batch(message("m-1"), message("m-2")), lambda_context))
    assert [] == calls.seen


def test_unstorable_result_counts_as_processed(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The body ran and a retry could only raise: the record is not reported, nor rerun."""
    runs: list[str] = []

    @idempotent_sqs_handler(persistence_store=idempotency_store)
    def handler(record: SQSRecord, context: Any) -> Any:
        runs.append(record.message_id)
        return object()

    event = batch(message("m-1"))
    assert [] == failed(handler(event, lambda_context))
    assert [] == failed(handler(event, lambda_context))
    assert ["m-1"] == runs


def test_unstorable_error_raised_by_the_handler_itself_is_a_failure(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The exemption covers this record's own result, not a nested call's error."""

    @idempotent_sqs_handler(persistence_store=idempotency_store)
    def handler(record: SQSRecord, context: Any) -> None:
        raise IdempotencyUnstorableResultError("a nested call's result")

    assert ["m-1"] == failed(handler(batch(message("m-1")), lambda_context))


# --- FIFO queues -------------------------------------------------------------------------------


@pytest.mark.parametrize("concurrency", [1, 16])
def test_fifo_failure_stops_its_group_and_other_groups_go_on(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    caplog: pytest.LogCaptureFixture,
    concurrency: int,
) -> None:
    """After a failure no record of its group starts; they are reported, other groups run."""
    calls = Calls(fail={"m-2"})
    event = batch(*(message(f"m-{n}", arn=FIFO_ARN, group=f"g{n % 2}") for n in range(5)))
    with caplog.at_level(logging.INFO, logger="idempotent_lambda"):
        response = make(idempotency_store, calls, max_concurrency=concurrency)(
            event, lambda_context
        )
    assert ["m-2", "m-4"] == failed(response)
    assert ["m-0", "m-1", "m-2", "m-3"] == sorted(calls.seen)
    assert "batch record not processed: source=sqs id=m-4 reason=after_failure" in caplog.text


def test_fifo_redelivery_resumes_from_the_failed_record(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Redelivered, the processed head replays and the failed tail runs in order."""
    calls = Calls(fail={"m-1"})
    handler = make(idempotency_store, calls)
    event = batch(*(message(f"m-{n}", arn=FIFO_ARN, group="g") for n in range(3)))
    assert ["m-1", "m-2"] == failed(handler(event, lambda_context))
    calls.fail.clear()
    assert [] == failed(handler(event, lambda_context))
    assert ["m-0", "m-1", "m-1", "m-2"] == calls.seen


def test_fifo_malformed_record_stops_its_group_too(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Any failure counts, not only handler exceptions: a malformed record stops its group."""
    broken = message("m-1", arn=FIFO_ARN, group="g")
    del broken["body"]
    calls = Calls()
    event = batch(
        message("m-0", arn=FIFO_ARN, group="g"), broken, message("m-2", arn=FIFO_ARN, group="g")
    )
    assert ["m-1", "m-2"] == failed(make(idempotency_store, calls)(event, lambda_context))
    assert ["m-0"] == calls.seen
