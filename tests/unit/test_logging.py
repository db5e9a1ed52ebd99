"""Decision logging: one structured line per decision, with the hashed key, never the data."""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyAlreadyInProgressError,
    IdempotencyConfig,
    IdempotencyPersistenceLayerError,
    IdempotencyUnstorableResultError,
    IdempotencyValidationError,
    InMemoryPersistenceLayer,
    idempotent,
)
from idempotent_lambda.testing import FakeLambdaContext
from tests.unit._doubles import Decisions, SpyStore

SECRET = f"card-4111-{uuid.uuid4().hex}"
KEY = re.compile(r"^secrets#[0-9a-f]{32}$")  # md5, the default format's digest


def run_every_path(store: InMemoryPersistenceLayer, context: FakeLambdaContext, hook: Any) -> None:
    """Drive claim, in-progress, replay, validation failure, raise, unstorable and store error."""
    config = IdempotencyConfig(
        event_key_jmespath="order_id", payload_validation_jmespath="card", decision_hook=hook
    )

    @idempotent(persistence_store=store, config=config, key_prefix="secrets")
    def handler(event: dict[str, Any], context: Any) -> Any:
        if event.get("nested"):
            with contextlib.suppress(IdempotencyAlreadyInProgressError):
                handler({**event, "nested": False}, context)
        if event.get("fail"):
            raise RuntimeError(f"declined {SECRET}")
        if event.get("opaque"):
            return {"token": SECRET, "object": object()}
        return {"token": SECRET, "order_id": event["order_id"]}

    @idempotent(
        persistence_store=SpyStore(store, fail={"claim"}), config=config, key_prefix="secrets"
    )
    def unreachable(event: dict[str, Any], context: Any) -> Any:
        return SECRET

    handler({"order_id": 1, "card": SECRET, "nested": True}, context)
    handler({"order_id": 1, "card": SECRET}, context)
    with pytest.raises(IdempotencyValidationError):
        handler({"order_id": 1, "card": f"other-{SECRET}"}, context)
    with pytest.raises(RuntimeError):
        handler({"order_id": 2, "card": SECRET, "fail": True}, context)
    for _ in range(2):
        with pytest.raises(IdempotencyUnstorableResultError):
            handler({"order_id": 3, "card": SECRET, "opaque": True}, context)
    with pytest.raises(IdempotencyPersistenceLayerError):
        unreachable({"order_id": 4, "card": SECRET}, context)


@pytest.fixture
def captured(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    caplog: pytest.LogCaptureFixture,
    decisions: Decisions,
) -> list[logging.LogRecord]:
    """Run every path with DEBUG logging captured; return the library's log records."""
    caplog.set_level(logging.DEBUG, logger="idempotent_lambda")
    run_every_path(idempotency_store, lambda_context, decisions)
    return [r for r in caplog.records if r.name.startswith("idempotent_lambda")]


def test_secret_never_appears_in_any_log_record(captured: list[logging.LogRecord]) -> None:
    """Neither the payload nor the result (nor the handler's error) reaches a log record."""
    leaks = [
        r.getMessage() for r in captured if SECRET in r.getMessage() or SECRET in repr(vars(r))
    ]

    assert [] == leaks
    assert captured


def test_one_decision_line_per_decision(
    captured: list[logging.LogRecord], decisions: Decisions
) -> None:
    """Every decision is logged once, in order, as a structured line."""
    lines = [r for r in captured if hasattr(r, "idempotency")]

    assert decisions.outcomes == [r.idempotency["outcome"] for r in lines]
    assert [
        "IN_PROGRESS",
        "CLAIMED",
        "REPLAYED",
        "VALIDATION_FAILED",
        "RELEASED",
        "UNSTORABLE",
        "REPLAYED",
        "STORE_ERROR",
    ] == decisions.outcomes


def test_decision_lines_carry_the_hashed_key(captured: list[logging.LogRecord]) -> None:
    """Each decision line names the stored key (``prefix#hexdigest``) in text and fields."""
    lines = [r for r in captured if hasattr(r, "idempotency")]

    keys = [r.idempotency.get("key", "") for r in lines]
    assert [True] * len(lines) == [bool(KEY.match(key)) for key in keys]
    assert [True] * len(lines) == [
        f"key={key}" in r.getMessage() for r, key in zip(lines, keys, strict=True)
    ]


def test_decision_levels(captured: list[logging.LogRecord]) -> None:
    """Normal decisions log at INFO; the store failing or a result lost log at ERROR."""
    levels = {r.idempotency["outcome"]: r.levelname for r in captured if hasattr(r, "idempotency")}

    assert {
        "IN_PROGRESS": "INFO",
        "CLAIMED": "INFO",
        "REPLAYED": "INFO",
        "VALIDATION_FAILED": "INFO",
        "RELEASED": "INFO",
        "UNSTORABLE": "ERROR",
        "STORE_ERROR": "ERROR",
    } == levels


def test_quiet_logger_gets_no_line_and_a_hook_still_gets_every_decision(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The logger's level is asked on every decision; a decision hook hears them all."""
    quiet = logging.getLogger(f"quiet-{uuid.uuid4().hex}")
    quiet.setLevel(logging.WARNING)
    lines: list[logging.LogRecord] = []
    handler_ = logging.Handler()
    handler_.emit = lines.append  # type: ignore[method-assign]
    quiet.addHandler(handler_)
    decisions = Decisions()

    @idempotent(
        persistence_store=idempotency_store,
        config=IdempotencyConfig(event_key_jmespath="order_id", logger=quiet),
    )
    def handler(event: dict[str, Any], context: Any) -> str:
        return "done"

    @idempotent(
        persistence_store=idempotency_store,
        config=IdempotencyConfig(
            event_key_jmespath="order_id", logger=quiet, decision_hook=decisions
        ),
        key_prefix="hooked",
    )
    def hooked(event: dict[str, Any], context: Any) -> str:
        return "done"

    for _ in range(2):
        handler({"order_id": 1}, lambda_context)
        hooked({"order_id": 1}, lambda_context)
    assert [] == lines
    assert ["CLAIMED", "REPLAYED"] == decisions.outcomes

    quiet.setLevel(logging.INFO)  # levels can change while the function is deployed
    handler({"order_id": 1}, lambda_context)
    assert ["REPLAYED"] == [r.idempotency["outcome"] for r in lines]  # type: ignore[attr-defined]
