"""After the body ran, no failure to decide, encode or store its result strands the record.

Each case follows the unstorable path: the caller gets `IdempotencyUnstorableResultError`, the
record is COMPLETED with a marker, and no retry runs the body again (issue 11, defects 1, 7a).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyConfig,
    IdempotencyRecord,
    IdempotencyUnstorableResultError,
    InMemoryPersistenceLayer,
    Status,
    idempotent,
)
from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler
from idempotent_lambda.exceptions import IdempotencyTransactionError
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from idempotent_lambda.transaction import current_transaction
from tests.events import http_events as ev
from tests.unit._doubles import Decisions, Runs, SpyStore, is_unstorable_marker
from tests.unit._modes import Mode
from tests.unit.test_sqs_adapter import batch, failed, message

EVENT = {"order_id": 7}
#: Past any lease these tests take (the context's remaining time, or 900 s), within the expiry.
PAST_THE_LEASE_S = 1000

needs_int_limit = pytest.mark.skipif(
    not hasattr(sys, "get_int_max_str_digits"),
    reason="this Python converts ints of any length to text",
)


def huge_int() -> int:
    """Return an int with more digits than `json` converts (4,300 by default)."""
    return 10 ** (sys.get_int_max_str_digits() + 1)


class EncoderFailsStore(SpyStore):
    """A store whose own encoding of a result (compression, say) fails with a plain error."""

    def complete(self, record: IdempotencyRecord) -> bool:
        """Fail on a result; store an unstorable marker."""
        data = record.response_data or ""
        if not is_unstorable_marker(data):
            self._enter("complete")
            raise ValueError("the compressor failed")
        return super().complete(record)


def marker_of(store: InMemoryPersistenceLayer, key: str | None) -> IdempotencyRecord:
    """Return the record of ``key``, checking it is COMPLETED with an unstorable marker."""
    record = store.get(key or "")
    assert record is not None
    assert (Status.COMPLETED, True) == (
        record.status,
        is_unstorable_marker(record.response_data),
    )
    return record


@needs_int_limit
def test_an_int_json_cannot_write_is_unstorable_and_never_runs_again(
    mode: Mode,
    idempotency_store: InMemoryPersistenceLayer,
    idempotency_clock: ManualClock,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
) -> None:
    """`json` raising ValueError on a huge int: typed error, a marker, no second run."""
    runs = Runs()

    def body(event: dict[str, Any], context: Any) -> Any:
        runs(event)
        return {"total": huge_int()}

    handler = mode.wrap(
        idempotent(
            persistence_store=idempotency_store,
            config=IdempotencyConfig(decision_hook=decisions),
        ),
        body,
    )

    with pytest.raises(IdempotencyUnstorableResultError, match="ValueError"):
        mode.call(handler, EVENT, lambda_context)
    marker_of(idempotency_store, decisions.last.key)
    idempotency_clock.advance(PAST_THE_LEASE_S)
    with pytest.raises(IdempotencyUnstorableResultError):
        mode.call(handler, EVENT, lambda_context)

    assert 1 == runs.count
    assert ["UNSTORABLE", "REPLAYED"] == decisions.outcomes


def test_a_store_failing_to_encode_the_result_is_unstorable(
    mode: Mode,
    idempotency_store: InMemoryPersistenceLayer,
    idempotency_clock: ManualClock,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
) -> None:
    """A plain exception from the store's complete (not a store outage) is unstorable too."""
    runs = Runs()
    store = EncoderFailsStore(idempotency_store)

    def body(event: dict[str, Any], context: Any) -> Any:
        runs(event)
        return {"ok": True}

    handler = mode.wrap(
        idempotent(persistence_store=store, config=IdempotencyConfig(decision_hook=decisions)),
        body,
    )

    with pytest.raises(IdempotencyUnstorableResultError) as raised:
        mode.call(handler, EVENT, lambda_context)
    marker_of(idempotency_store, decisions.last.key)
    idempotency_clock.advance(PAST_THE_LEASE_S)
    with pytest.raises(IdempotencyUnstorableResultError):
        mode.call(handler, EVENT, lambda_context)

    assert isinstance(raised.value.__cause__, ValueError)
    assert 1 == runs.count


@needs_int_limit
def test_the_sqs_adapter_does_not_run_an_unencodable_record_again(
    idempotency_store: InMemoryPersistenceLayer,
    idempotency_clock: ManualClock,
    lambda_context: FakeLambdaContext,
) -> None:
    """The record counts as processed, and its redelivery after the lease does not run it."""
    runs: list[str] = []

    @idempotent_sqs_handler(persistence_store=idempotency_store)
    def handler(record: SQSRecord, context: Any) -> Any:
        runs.append(record.message_id)
        return huge_int()

    event = batch(message("m-1", {"order_id": 1}), message("m-2", {"order_id": 2}))
    assert [] == failed(handler(event, lambda_context))
    idempotency_clock.advance(PAST_THE_LEASE_S)
    redelivered = FakeLambdaContext(clock=idempotency_clock)
    assert [] == failed(handler(event, redelivered))
    assert ["m-1", "m-2"] == sorted(runs)


@needs_int_limit
def test_an_unencodable_result_with_queued_writes_commits_nothing(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
) -> None:
    """With business writes, the typed transaction error, the record released, nothing written."""
    config = IdempotencyConfig(decision_hook=decisions)

    @idempotent(persistence_store=idempotency_store, config=config)
    def handler(event: dict[str, Any], context: Any) -> int:
        current_transaction().put("orders", {"pk": "order#7"})
        return huge_int()

    with pytest.raises(IdempotencyTransactionError, match="nothing was written") as raised:
        handler(EVENT, lambda_context)

    assert isinstance(raised.value.__cause__, IdempotencyUnstorableResultError)
    assert [] == idempotency_store.committed_writes
    assert idempotency_store.get(decisions.last.key or "") is None


def test_a_raising_store_4xx_predicate_is_unstorable(
    idempotency_store: InMemoryPersistenceLayer,
    idempotency_clock: ManualClock,
    lambda_context: FakeLambdaContext,
) -> None:
    """The predicate's error: the caller and every retry get the typed error; one run only."""
    runs: list[dict[str, Any]] = []
    spy = SpyStore(idempotency_store)

    def store_4xx(status: int) -> bool:
        raise ZeroDivisionError(status)

    @idempotent_http(persistence_store=spy, store_4xx=store_4xx)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event)
        return {"statusCode": 409, "body": json.dumps({"error": "taken"})}

    event = ev.make_event("apigateway-v2", key="k-1")
    with pytest.raises(IdempotencyUnstorableResultError, match="ZeroDivisionError") as raised:
        handler(event, lambda_context)
    marker_of(idempotency_store, spy.claims[0].idempotency_key)
    idempotency_clock.advance(PAST_THE_LEASE_S)
    with pytest.raises(IdempotencyUnstorableResultError):
        handler(event, lambda_context)

    assert isinstance(raised.value.__cause__, ZeroDivisionError)
    assert 1 == len(runs)
