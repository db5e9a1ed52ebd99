"""Transactions in the adapters: unrecorded requests and records, and conflicts in HTTP terms."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest

from idempotent_lambda import IdempotencyConfig, InMemoryPersistenceLayer
from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.adapters.dynamodb_stream import (
    DynamoDBStreamRecord,
    idempotent_stream_handler,
)
from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler
from idempotent_lambda.exceptions import (
    CancellationReason,
    IdempotencyTransactionConflictError,
)
from idempotent_lambda.persistence.base import TransactItem
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from idempotent_lambda.transaction import current_transaction
from tests.events import http_events as ev
from tests.unit._doubles import Decisions

SECRET = "4111-1111-1111-1111"


def put(pk: str) -> None:
    """Queue a put of ``{"pk": pk}`` on the ``orders`` table of the current transaction."""
    current_transaction().put("orders", {"pk": pk}, condition="attribute_not_exists(pk)")


def committed(store: InMemoryPersistenceLayer) -> list[str]:
    """Return the ``pk`` of every committed put, in order."""
    return [write["Put"]["Item"]["pk"]["S"] for write in store.committed_writes]


class ConflictOn:
    """``apply_writes`` that cancels any transaction writing one of ``keys``, as DynamoDB would."""

    def __init__(self, *keys: str) -> None:
        self.keys = set(keys)

    def __call__(self, writes: Sequence[TransactItem]) -> None:
        pks = [write["Put"]["Item"]["pk"]["S"] for write in writes]
        if self.keys & set(pks):
            reasons = tuple(
                CancellationReason(
                    index=n,
                    operation="Put",
                    table="orders",
                    code="ConditionalCheckFailed" if pk in self.keys else "None",
                    message=f"The conditional request failed for {SECRET}",
                    item={"pk": {"S": pk}, "card": {"S": SECRET}},
                )
                for n, pk in enumerate(pks)
            )
            raise IdempotencyTransactionConflictError(
                "a business write's condition failed", reasons=reasons
            )


@pytest.fixture
def conflicting_store(idempotency_clock: ManualClock) -> InMemoryPersistenceLayer:
    """A store whose transactions writing ``taken`` are cancelled."""
    return InMemoryPersistenceLayer(clock=idempotency_clock, apply_writes=ConflictOn("taken"))


def sqs(message_id: str, body: str) -> dict[str, Any]:
    """Return an SQS record."""
    return {
        "messageId": message_id,
        "receiptHandle": "r",
        "body": body,
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1545082649183"},
        "messageAttributes": {},
        "md5OfBody": "0",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
        "awsRegion": "us-east-1",
    }


def stream_change(sequence: int) -> dict[str, Any]:
    """Return a DynamoDB Stream INSERT record."""
    return {
        "eventID": f"e{sequence}",
        "eventName": "INSERT",
        "eventSource": "aws:dynamodb",
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/T/stream/2024",
        "dynamodb": {
            "Keys": {"pk": {"S": f"item{sequence}"}},
            "NewImage": {"pk": {"S": f"item{sequence}"}},
            "SequenceNumber": str(sequence),
            "StreamViewType": "NEW_IMAGE",
        },
    }


# ---------------------------------------------------------------- HTTP: unrecorded requests


@pytest.mark.parametrize("is_async", [False, True])
def test_http_with_idempotency_disabled_still_commits_the_writes(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    monkeypatch: pytest.MonkeyPatch,
    is_async: bool,
) -> None:
    """``IDEMPOTENCY_DISABLED``: no record, but `current_transaction` still works and commits."""
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "true")
    event = ev.make_event("apigateway-v2", key="k1")
    if is_async:

        @idempotent_http(persistence_store=idempotency_store)
        async def async_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
            put("o1")
            return {"statusCode": 201, "body": ""}

        response = asyncio.run(async_handler(event, lambda_context))
    else:

        @idempotent_http(persistence_store=idempotency_store)
        def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
            put("o1")
            return {"statusCode": 201, "body": ""}

        response = handler(event, lambda_context)

    assert 201 == response["statusCode"]
    assert ["o1"] == committed(idempotency_store)
    assert 0 == len(idempotency_store)


def test_http_without_an_optional_key_commits_stored_responses_only(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """No key (``require_key=False``): 2xx commits its writes; a 5xx discards them, as recorded."""

    @idempotent_http(persistence_store=idempotency_store, require_key=False)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        put(event["body"])
        return {"statusCode": 201 if event["body"] == "ok" else 500, "body": ""}

    created = handler(ev.make_event("apigateway-v1", body="ok"), lambda_context)
    failed = handler(ev.make_event("apigateway-v1", body="down"), lambda_context)

    assert (201, 500) == (created["statusCode"], failed["statusCode"])
    assert ["ok"] == committed(idempotency_store)
    assert 0 == len(idempotency_store)


def test_http_4xx_policy_applies_to_unrecorded_writes_too(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """``store_4xx=False``: a 4xx is not stored when recorded, so unrecorded it commits nothing."""

    @idempotent_http(persistence_store=idempotency_store, require_key=False, store_4xx=False)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        put("o1")
        return {"statusCode": 409, "body": ""}

    assert 409 == handler(ev.make_event("function-url"), lambda_context)["statusCode"]
    assert [] == committed(idempotency_store)


def test_http_handler_error_without_a_key_discards_writes_and_propagates(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """An unrecorded handler that raises commits nothing; its exception is unchanged."""

    @idempotent_http(persistence_store=idempotency_store, require_key=False)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        put("o1")
        raise ValueError("declined")

    with pytest.raises(ValueError, match="declined"):
        handler(ev.make_event("alb"), lambda_context)
    assert [] == committed(idempotency_store)


# ---------------------------------------------------------------- HTTP: conflicts become 409


@pytest.mark.parametrize("shape", ev.SHAPES)
def test_http_conflict_after_the_handler_is_a_409_problem_and_not_stored(
    conflicting_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext, shape: str
) -> None:
    """A business condition failing at commit answers 409 problem+json; a retry runs again."""
    runs: list[str] = []

    @idempotent_http(persistence_store=conflicting_store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event["body"])
        put("taken")
        return {"statusCode": 201, "body": json.dumps({"card": SECRET})}

    event = ev.make_event(shape, key="k1", body="order")

    first = handler(event, lambda_context)
    retry = handler(event, lambda_context)

    for response in (first, retry):
        assert 409 == response["statusCode"]
        body = ev.problem(response)
        assert {"type": "about:blank", "title": "Conflict", "status": 409} == {
            k: body[k] for k in ("type", "title", "status")
        }
        assert body["detail"]
        assert SECRET not in json.dumps(response)
        assert "taken" not in json.dumps(response)
        assert not ev.header(response, "Retry-After")
        assert not ev.header(response, "Idempotent-Replayed")
    assert ["order", "order"] == runs  # not stored: the retry ran the handler again
    assert 0 == len(conflicting_store)  # the record was released
    assert [] == conflicting_store.committed_writes


def test_http_conflict_is_logged_and_the_record_released(
    conflicting_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The engine reports RELEASED with the conflict; the adapter logs its 409, without data."""

    @idempotent_http(
        persistence_store=conflicting_store, config=IdempotencyConfig(decision_hook=decisions)
    )
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        put("taken")
        return {"statusCode": 201, "body": ""}

    with caplog.at_level("INFO", logger="idempotent_lambda"):
        handler(ev.make_event("apigateway-v2", key="k1"), lambda_context)

    assert ["RELEASED"] == decisions.outcomes
    assert "IdempotencyTransactionConflictError" == decisions.last.error
    (line,) = [r for r in caplog.records if "http conflict" in r.getMessage()]
    assert {"outcome": "CONFLICT", "status": 409, "reason": "transaction-conflict"} == (
        line.idempotency  # type: ignore[attr-defined]
    )
    assert SECRET not in caplog.text


def test_http_conflict_without_a_record_is_a_409_too(
    conflicting_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """Unrecorded (no key, keys optional): a conflicting commit is answered the same way."""

    @idempotent_http(persistence_store=conflicting_store, require_key=False)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        put("taken")
        return {"statusCode": 201, "body": ""}

    response = handler(ev.make_event("apigateway-v1"), lambda_context)

    assert 409 == response["statusCode"]
    assert "Conflict" == ev.problem(response)["title"]


def test_async_http_conflict_is_a_409(
    conflicting_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """``async def`` handlers get the same 409."""

    @idempotent_http(persistence_store=conflicting_store)
    async def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        put("taken")
        return {"statusCode": 201, "body": ""}

    response = asyncio.run(handler(ev.make_event("apigateway-v2", key="k1"), lambda_context))

    assert 409 == response["statusCode"]
    assert 0 == len(conflicting_store)


def test_a_conflict_raised_by_the_handler_itself_propagates(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The handler's own conflict error (a nested call's) is its exception: not turned into 409."""

    @idempotent_http(persistence_store=idempotency_store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        raise IdempotencyTransactionConflictError("nested")

    with pytest.raises(IdempotencyTransactionConflictError, match="nested"):
        handler(ev.make_event("apigateway-v2", key="k1"), lambda_context)
    assert 0 == len(idempotency_store)


# ---------------------------------------------------------------- batches: unrecorded records


@pytest.mark.parametrize("is_async", [False, True])
def test_sqs_records_with_idempotency_disabled_commit_their_writes(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    monkeypatch: pytest.MonkeyPatch,
    is_async: bool,
) -> None:
    """Disabled: each record still has its own transaction; a failing one's writes are dropped."""
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "1")

    if is_async:

        @idempotent_sqs_handler(persistence_store=idempotency_store)
        async def async_handle(record: SQSRecord, context: Any) -> None:
            put(record.message_id)
            if record.body == "bad":
                raise ValueError("bad record")

        handle: Any = async_handle
    else:

        @idempotent_sqs_handler(persistence_store=idempotency_store)
        def sync_handle(record: SQSRecord, context: Any) -> None:
            put(record.message_id)
            if record.body == "bad":
                raise ValueError("bad record")

        handle = sync_handle

    event = {"Records": [sqs("m1", "good"), sqs("m2", "bad"), sqs("m3", "good")]}
    response = handle(event, lambda_context)

    assert [{"itemIdentifier": "m2"}] == response["batchItemFailures"]
    assert ["m1", "m3"] == sorted(committed(idempotency_store))  # two lanes: any order
    assert 0 == len(idempotency_store)


def test_sqs_records_without_key_material_commit_their_writes(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A record whose business key is absent runs unrecorded, and its writes commit."""

    @idempotent_sqs_handler(
        persistence_store=idempotency_store,
        config=IdempotencyConfig(event_key_jmespath="powertools_json(body).order_id"),
    )
    def handle(record: SQSRecord, context: Any) -> None:
        put(record.message_id)

    event = {"Records": [sqs("m1", '{"order_id": 1}'), sqs("m2", '{"other": 2}')]}
    response = handle(event, lambda_context)

    assert [] == response["batchItemFailures"]
    assert ["m1", "m2"] == sorted(committed(idempotency_store))  # two lanes: any order
    assert 1 == len(idempotency_store)  # only m1 has a record


def test_an_unrecorded_record_whose_commit_conflicts_is_retried(
    conflicting_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its transaction cancelled, the record is reported in ``batchItemFailures``."""
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "true")

    @idempotent_sqs_handler(persistence_store=conflicting_store)
    def handle(record: SQSRecord, context: Any) -> None:
        put(record.body)

    event = {"Records": [sqs("m1", "taken"), sqs("m2", "free")]}
    response = handle(event, lambda_context)

    assert [{"itemIdentifier": "m1"}] == response["batchItemFailures"]
    assert ["free"] == committed(conflicting_store)


def test_stream_records_with_idempotency_disabled_commit_their_writes(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stream adapter runs unrecorded records in a transaction too."""
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "true")

    @idempotent_stream_handler(persistence_store=idempotency_store)
    def handle(record: DynamoDBStreamRecord, context: Any) -> None:
        put(record.sequence_number or "")

    response = handle({"Records": [stream_change(1), stream_change(2)]}, lambda_context)

    assert [] == response["batchItemFailures"]
    assert ["1", "2"] == sorted(committed(idempotency_store))  # two items: any order
