"""The adapters log their decisions through ``IdempotencyConfig.logger``, like the decorators."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from idempotent_lambda import IdempotencyConfig, InMemoryPersistenceLayer
from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.adapters.dynamodb_stream import (
    DynamoDBStreamRecord,
    idempotent_stream_handler,
)
from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler
from idempotent_lambda.testing import FakeLambdaContext
from tests.events import http_events as ev


class RecordingLogger:
    """Stands for a Powertools ``Logger``: ``info``/``warning``/``error`` taking ``extra=``."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def _log(self, level: str, extra: dict[str, Any] | None) -> None:
        self.lines.append((level, dict((extra or {}).get("idempotency", {}))))

    def info(self, msg: str, *args: Any, extra: dict[str, Any] | None = None, **_: Any) -> None:
        self._log("INFO", extra)

    def warning(self, msg: str, *args: Any, extra: dict[str, Any] | None = None, **_: Any) -> None:
        self._log("WARNING", extra)

    def error(self, msg: str, *args: Any, extra: dict[str, Any] | None = None, **_: Any) -> None:
        self._log("ERROR", extra)

    @property
    def outcomes(self) -> list[str]:
        return [fields.get("outcome", "") for _, fields in self.lines]


@pytest.fixture
def app_logger() -> RecordingLogger:
    return RecordingLogger()


def library_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "idempotent_lambda"]


def sqs(message_id: str, body: str = "{}") -> dict[str, Any]:
    return {
        "messageId": message_id,
        "receiptHandle": "r",
        "body": body,
        "attributes": {},
        "messageAttributes": {},
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
    }


def stream_change(sequence: int) -> dict[str, Any]:
    return {
        "eventID": f"e{sequence}",
        "eventName": "INSERT",
        "eventSource": "aws:dynamodb",
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/T/stream/2024",
        "dynamodb": {"Keys": {"pk": {"S": "a"}}, "SequenceNumber": str(sequence)},
    }


def test_http_decisions_go_to_the_configured_logger(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    app_logger: RecordingLogger,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CLAIMED, SKIPPED, REJECTED and DISABLED lines of `idempotent_http` use ``config.logger``."""
    config = IdempotencyConfig(logger=app_logger)

    @idempotent_http(persistence_store=idempotency_store, config=config, require_key=False)
    def optional(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": 200, "body": ""}

    @idempotent_http(persistence_store=idempotency_store, config=config)
    def required(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": 200, "body": ""}

    with caplog.at_level(logging.DEBUG, logger="idempotent_lambda"):
        optional(ev.make_event("apigateway-v2", key="k1"), lambda_context)
        optional(ev.make_event("apigateway-v2"), lambda_context)
        required(ev.make_event("apigateway-v2"), lambda_context)
        monkeypatch.setenv("IDEMPOTENCY_DISABLED", "true")
        optional(ev.make_event("apigateway-v2", key="k1"), lambda_context)

    assert ["CLAIMED", "SKIPPED", "REJECTED", "DISABLED"] == app_logger.outcomes
    assert [] == library_lines(caplog)


@pytest.mark.parametrize("disabled", [False, True])
def test_sqs_decisions_go_to_the_configured_logger(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    app_logger: RecordingLogger,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    disabled: bool,
) -> None:
    """SKIPPED (no key material) and DISABLED lines of the SQS adapter use ``config.logger``."""
    if disabled:
        monkeypatch.setenv("IDEMPOTENCY_DISABLED", "true")
    config = IdempotencyConfig(event_key_jmespath="powertools_json(body).id", logger=app_logger)

    @idempotent_sqs_handler(persistence_store=idempotency_store, config=config)
    def handle(record: SQSRecord, context: Any) -> None:
        return None

    with caplog.at_level(logging.DEBUG, logger="idempotent_lambda"):
        handle({"Records": [sqs("m1", '{"id": 1}'), sqs("m2")]}, lambda_context)

    # m1 and m2 run on lanes of their own: their lines may come in either order.
    expected = ["DISABLED"] if disabled else ["CLAIMED", "SKIPPED"]
    assert expected == sorted(app_logger.outcomes)
    assert [] == library_lines(caplog)


def test_stream_decisions_go_to_the_configured_logger(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    app_logger: RecordingLogger,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stream adapter's DISABLED line uses ``config.logger`` too."""
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "true")

    @idempotent_stream_handler(
        persistence_store=idempotency_store, config=IdempotencyConfig(logger=app_logger)
    )
    def handle(record: DynamoDBStreamRecord, context: Any) -> None:
        return None

    with caplog.at_level(logging.DEBUG, logger="idempotent_lambda"):
        handle({"Records": [stream_change(1)]}, lambda_context)

    assert ["DISABLED"] == app_logger.outcomes
    assert [] == library_lines(caplog)
