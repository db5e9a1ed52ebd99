"""Batched completions on moto's server: when a completion may go without its condition, and
what the items written together are (DESIGN §13, "Batched completions")."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from idempotent_lambda import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    IdempotencyRecord,
    Status,
)
from idempotent_lambda._claim import CLOCK_SKEW_TOLERANCE_MS
from idempotent_lambda._observability import Outcome
from idempotent_lambda._record_format import NATIVE, POWERTOOLS
from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler
from idempotent_lambda.testing import FakeLambdaContext, ManualClock, SQSMessageFields, sqs_event

START_MS = 1_767_225_600_000


def _records(store: DynamoDBPersistenceLayer, record_format: str = "powertools") -> list[Any]:
    view = store.with_record_format(record_format)
    items = view._get_client().scan(TableName=view.table_name, ConsistentRead=True)["Items"]
    return [view._schema.from_item(item) for item in items]


def _handler(store: DynamoDBPersistenceLayer, ran: list[int], **config: Any) -> Any:
    @idempotent_sqs_handler(persistence_store=store, config=IdempotencyConfig(**config))
    def handler(record: SQSRecord, context: Any) -> dict[str, int]:
        ran.append(record.json_body["n"])
        return {"n": record.json_body["n"]}

    return handler


def _event(count: int, receive_count: int = 1) -> dict[str, Any]:
    messages = [SQSMessageFields(body={"n": n}, message_id=f"m-{n}") for n in range(count)]
    return sqs_event(records=messages, receive_count=receive_count)


@pytest.mark.parametrize(("beyond_ms", "grouped"), [(0, False), (1, True)])
def test_a_completion_goes_unconditionally_only_while_the_lease_has_more_than_the_bound_left(
    idempotency_table: str,
    dynamodb_client: Any,
    requests: Counter[str],
    beyond_ms: int,
    grouped: bool,
) -> None:
    """Lease left = tolerance + the request's bound: the conditional PutItem; 1 ms more: the
    completions go together in BatchWriteItem requests."""
    clock = ManualClock(START_MS)
    store = DynamoDBPersistenceLayer(idempotency_table, boto3_client=dynamodb_client, clock=clock)
    bound = store.unconditional_write_ms()
    assert bound is not None
    ran: list[int] = []
    handler = _handler(store, ran)
    lease_ms = CLOCK_SKEW_TOLERANCE_MS + bound + beyond_ms
    assert {"batchItemFailures": []} == handler(_event(6), FakeLambdaContext(lease_ms, clock=clock))
    counted = dict(requests)
    assert 6 == len(ran)
    assert {Status.COMPLETED} == {record.status for record in _records(store)}
    if grouped:
        assert 6 == counted["PutItem"]  # the claims
        assert 1 <= counted["BatchWriteItem"] <= 6
    else:
        assert {"PutItem": 12} == counted


def test_past_the_window_a_taken_over_record_is_not_overwritten(
    idempotency_table: str, dynamodb_client: Any
) -> None:
    """The lease ends while the body runs and another invocation takes the key over: the
    completion is the conditional put, which fails, so the new holder's claim stays."""
    clock = ManualClock(START_MS)
    store = DynamoDBPersistenceLayer(idempotency_table, boto3_client=dynamodb_client, clock=clock)
    outcomes: list[Outcome] = []
    lease_ms = 600_000

    @idempotent_sqs_handler(
        persistence_store=store,
        config=IdempotencyConfig(decision_hook=lambda d: outcomes.append(d.outcome)),
    )
    def handler(record: SQSRecord, context: Any) -> str:
        (ours,) = _records(store)
        clock.advance(lease_ms + CLOCK_SKEW_TOLERANCE_MS + 1)
        now = clock.now_ms()
        other = IdempotencyRecord(
            ours.idempotency_key,
            Status.IN_PROGRESS,
            now // 1000 + 3600,
            now + 60_000,
            None,
            None,
            "another-invocation",
        )
        view = store.with_record_format("powertools")
        taken = view.claim(other, now_ms=now, lease_cutoff_ms=now - CLOCK_SKEW_TOLERANCE_MS)
        assert taken.claimed
        return "done"

    assert {"batchItemFailures": []} == handler(_event(1), FakeLambdaContext(lease_ms, clock=clock))
    (record,) = _records(store)
    assert (Status.IN_PROGRESS, "another-invocation") == (record.status, record.owner)
    assert [Outcome.LEASE_LOST] == outcomes


@pytest.mark.parametrize("record_format", ["powertools", "native"])
@pytest.mark.parametrize("data", ['{"n": 1}', "x" * 6000, None])
def test_a_grouped_completion_writes_the_item_the_conditional_one_writes(
    dynamodb_store: DynamoDBPersistenceLayer, record_format: str, data: str | None
) -> None:
    """In either record format, for a short result, one the native format compresses and an
    unstorable marker, BatchWriteItem writes exactly the item the conditional PutItem writes."""
    view = dynamodb_store.with_record_format(record_format)
    formats = {"powertools": POWERTOOLS, "native": NATIVE}
    stored = data if data is not None else formats[record_format].unstorable_marker("too big")
    items = []
    for key, write in (("k#conditional", "complete"), ("k#grouped", "grouped")):
        claim = IdempotencyRecord(key, Status.IN_PROGRESS, 2_000_000_000, START_MS, None, "h", "me")
        assert view.claim(claim, now_ms=START_MS, lease_cutoff_ms=START_MS).claimed
        done = IdempotencyRecord(key, Status.COMPLETED, 2_000_000_000, None, stored, "h", "me")
        if write == "complete":
            assert view.complete(done)
        else:
            assert [] == view.put_completed([done])
        raw = view._get_item(key)
        assert raw is not None
        items.append(
            {
                name: value
                for name, value in raw.items()
                if name != view._schema.idempotency_key_attr
            }
        )
    assert items[0] == items[1]


def test_powertools_replays_completions_written_together(
    idempotency_table: str, dynamodb_client: Any, requests: Counter[str]
) -> None:
    """Our SQS batch (Powertools' record format, keys as Powertools computes them) completes in
    BatchWriteItem requests; Powertools' BatchProcessor + idempotent_function on the same table
    replays every record's result from them without running its handler."""
    from aws_lambda_powertools.utilities import idempotency as pt
    from aws_lambda_powertools.utilities.batch import (
        BatchProcessor,
        EventType,
        process_partial_response,
    )

    config = pt.IdempotencyConfig(event_key_jmespath="messageId")
    layer = pt.DynamoDBPersistenceLayer(table_name=idempotency_table, boto3_client=dynamodb_client)
    ran: list[Any] = []

    @pt.idempotent_function(data_keyword_argument="record", config=config, persistence_store=layer)
    def record_handler(record: dict[str, Any]) -> Any:
        ran.append(record)
        return {"ran": "again"}

    store = DynamoDBPersistenceLayer(idempotency_table, boto3_client=dynamodb_client)
    ours = idempotent_sqs_handler(
        persistence_store=store,
        config=IdempotencyConfig(event_key_jmespath="messageId"),
        key_prefix=f"test-func.{record_handler.__module__}.{record_handler.__qualname__}",
        source_scope="shared",
    )(lambda record, context: {"n": record.json_body["n"]})
    event = _event(30)
    assert {"batchItemFailures": []} == ours(event, FakeLambdaContext(600_000))
    assert 30 == requests["PutItem"]  # the claims
    assert 1 <= requests["BatchWriteItem"] <= 30

    replayed: list[Any] = []
    context = FakeLambdaContext(600_000)
    config.register_lambda_context(context)
    answer = process_partial_response(
        event=event,
        record_handler=lambda record: replayed.append(record_handler(record=record.raw_event)),
        processor=BatchProcessor(EventType.SQS),
        context=context,
    )
    assert ({"batchItemFailures": []}, []) == (answer, ran)
    assert [{"n": n} for n in range(30)] == replayed


def test_a_completion_with_business_writes_stays_one_transaction(
    make_table: Any, dynamodb_client: Any, requests: Counter[str]
) -> None:
    """Records whose bodies queue writes with `current_transaction()` complete each in its own
    TransactWriteItems (record and writes, all or none); the rest of the batch goes together."""
    from idempotent_lambda.transaction import current_transaction

    store = DynamoDBPersistenceLayer(make_table(), boto3_client=dynamodb_client)
    orders = make_table()
    requests.clear()

    @idempotent_sqs_handler(persistence_store=store)
    def handler(record: SQSRecord, context: Any) -> int:
        n = record.json_body["n"]
        if n % 2:
            current_transaction().put(orders, {"id": f"order-{n}"})
        return n

    assert {"batchItemFailures": []} == handler(_event(6), FakeLambdaContext(600_000))
    counted = dict(requests)
    assert (6, 3) == (counted["PutItem"], counted["TransactWriteItems"])  # claims; 1, 3, 5
    assert 1 <= counted["BatchWriteItem"] <= 3  # the completions of 0, 2, 4
    assert {Status.COMPLETED} == {record.status for record in _records(store)}
    written = dynamodb_client.scan(TableName=orders, ConsistentRead=True)["Items"]
    assert {"order-1", "order-3", "order-5"} == {item["id"]["S"] for item in written}
