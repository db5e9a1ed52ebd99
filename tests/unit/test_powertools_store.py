"""A store written against Powertools' ``BasePersistenceLayer`` contract runs on our lifecycle."""

from __future__ import annotations

import decimal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyAlreadyInProgressError,
    IdempotencyConfig,
    IdempotencyPersistenceLayerError,
    IdempotencyValidationError,
    PersistenceStore,
    idempotent,
    idempotent_function,
)
from idempotent_lambda.exceptions import (
    IdempotencyInvalidStatusError,
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
)
from idempotent_lambda.persistence.base import BasePersistenceLayer, DataRecord
from idempotent_lambda.testing import FakeLambdaContext, ManualClock


class DictStore(BasePersistenceLayer):
    """A Powertools-contract store over a dict, with the conditional put Powertools' docs show.

    Args:
        clock: Time for its own conditions (the engine reads it too).
        takes_over_leases: Whether ``_put_record`` replaces an IN_PROGRESS record whose lease
            has passed (Powertools' DynamoDB store does; the docs' example store does not).
        passes_old_record: Whether a refused put carries the blocking record.
    """

    def __init__(
        self, clock: ManualClock, *, takes_over_leases: bool = True, passes_old_record: bool = True
    ) -> None:
        super().__init__()
        self.clock = clock
        self.items: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.takes_over_leases = takes_over_leases
        self.passes_old_record = passes_old_record
        self._lock = threading.Lock()

    def _record(self, item: dict[str, Any]) -> DataRecord:
        return DataRecord(
            idempotency_key=item["id"],
            status=item["status"],
            expiry_timestamp=item["expiration"],
            in_progress_expiry_timestamp=item.get("in_progress_expiration"),
            response_data=item.get("data", ""),
            payload_hash=item.get("validation", ""),
        )

    def _get_record(self, idempotency_key: str) -> DataRecord:
        self.calls.append("get")
        with self._lock:
            item = self.items.get(idempotency_key)
        if item is None:
            raise IdempotencyItemNotFoundError
        return self._record(item)

    def _put_record(self, data_record: DataRecord) -> None:
        self.calls.append("put")
        now_ms = self.clock.now_ms()
        with self._lock:
            old = self.items.get(data_record.idempotency_key)
            replaceable = old is None or old["expiration"] < now_ms // 1000
            if old is not None and self.takes_over_leases and old["status"] == "INPROGRESS":
                lease = old.get("in_progress_expiration")
                replaceable = replaceable or (lease is not None and lease < now_ms)
            if not replaceable:
                assert old is not None
                raise IdempotencyItemAlreadyExistsError(
                    old_data_record=self._record(old) if self.passes_old_record else None
                )
            self.items[data_record.idempotency_key] = {
                "id": data_record.idempotency_key,
                "status": data_record.status,
                "expiration": data_record.expiry_timestamp,
                "in_progress_expiration": data_record.in_progress_expiry_timestamp,
                **(
                    {"validation": data_record.payload_hash}
                    if self.payload_validation_enabled
                    else {}
                ),
            }

    def _update_record(self, data_record: DataRecord) -> None:
        self.calls.append("update")
        with self._lock:
            self.items[data_record.idempotency_key] = {
                "id": data_record.idempotency_key,
                "status": data_record.status,
                "expiration": data_record.expiry_timestamp,
                "data": data_record.response_data,
                "validation": data_record.payload_hash,
            }

    def _delete_record(self, data_record: DataRecord) -> None:
        self.calls.append("delete")
        with self._lock:
            self.items.pop(data_record.idempotency_key, None)


@pytest.fixture
def clock() -> ManualClock:
    """Return a clock the test moves, starting now: `DataRecord.status` reads the wall clock."""
    return ManualClock(start_ms=time.time_ns() // 1_000_000)


def test_it_is_a_persistence_store(clock: ManualClock) -> None:
    """The subclass satisfies our store Protocol without writing any of its methods."""
    assert isinstance(DictStore(clock), PersistenceStore)


def test_first_call_runs_and_retries_replay(clock: ManualClock) -> None:
    """Put then update on the first call, one put on a replay; Powertools' status spellings."""
    store = DictStore(clock)
    seen: list[str] = []

    @idempotent(persistence_store=store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        (item,) = store.items.values()
        seen.append(item["status"])
        return {"ok": event["n"], "empty": {}}

    first = handler({"n": 1}, FakeLambdaContext())
    replay = handler({"n": 1}, FakeLambdaContext())

    assert {"ok": 1, "empty": {}} == first == replay
    assert ["INPROGRESS"] == seen
    assert ["put", "update", "put"] == store.calls
    assert ["COMPLETED"] == [item["status"] for item in store.items.values()]


def test_failed_body_deletes_the_record(clock: ManualClock) -> None:
    """The body raising deletes the record, so a retry runs again."""
    store = DictStore(clock)
    attempts: list[int] = []

    @idempotent_function(data_keyword_argument="order", persistence_store=store)
    def process(order: dict[str, Any]) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("first attempt fails")
        return "done"

    with pytest.raises(RuntimeError):
        process(order={"id": 1})
    assert {} == store.items
    assert "done" == process(order={"id": 1})
    assert 2 == len(attempts)


def test_validation_hash_is_written_and_checked(clock: ManualClock) -> None:
    """The store writes the validation hash; a changed amount is refused on replay."""
    store = DictStore(clock)
    config = IdempotencyConfig(event_key_jmespath="id", payload_validation_jmespath="amount")

    @idempotent_function(data_keyword_argument="order", persistence_store=store, config=config)
    def process(order: dict[str, Any]) -> int:
        return int(order["amount"])

    assert 5 == process(order={"id": 1, "amount": 5})
    with pytest.raises(IdempotencyValidationError):
        process(order={"id": 1, "amount": 6})
    assert all(item["validation"] for item in store.items.values())


def test_duplicate_while_running_is_refused(clock: ManualClock) -> None:
    """A second thread with the same key gets in-progress while the first runs."""
    store = DictStore(clock)
    started, finish = threading.Event(), threading.Event()
    runs: list[int] = []

    @idempotent_function(data_keyword_argument="order", persistence_store=store)
    def process(order: dict[str, Any]) -> str:
        runs.append(1)
        started.set()
        assert finish.wait(60)
        return "done"

    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(process, order={"id": 1})
        assert started.wait(60)
        with pytest.raises(IdempotencyAlreadyInProgressError):
            process(order={"id": 1})
        finish.set()
        assert "done" == first.result(60)
    assert "done" == process(order={"id": 1})
    assert 1 == len(runs)


@pytest.mark.parametrize("passes_old_record", [True, False])
def test_lease_takeover_depends_on_the_store(clock: ManualClock, passes_old_record: bool) -> None:
    """An abandoned claim is taken over when the store's put allows it, else it blocks."""
    for takes_over, expected in ((True, "ran"), (False, IdempotencyAlreadyInProgressError)):
        store = DictStore(clock, takes_over_leases=takes_over, passes_old_record=passes_old_record)
        config = IdempotencyConfig(in_progress_expiry_seconds=10, expires_after_seconds=3600)

        @idempotent_function(data_keyword_argument="order", persistence_store=store, config=config)
        def process(order: dict[str, Any]) -> str:
            return "ran"

        abandoned = {"id": 1}
        key = _claim_and_abandon(store, process, abandoned)
        clock.advance(60)

        if expected == "ran":
            assert "ran" == process(order=abandoned)
            assert "COMPLETED" == store.items[key]["status"]
        else:
            with pytest.raises(IdempotencyAlreadyInProgressError):
                process(order=abandoned)


def _claim_and_abandon(store: DictStore, process: Any, order: dict[str, Any]) -> str:
    """Leave an IN_PROGRESS record behind, as a crashed invocation would; return its key."""
    original = store._update_record
    store._update_record = lambda data_record: None  # type: ignore[method-assign]
    store._delete_record = lambda data_record: None  # type: ignore[method-assign]
    try:
        process(order=order)
    finally:
        store._update_record = original  # type: ignore[method-assign]
        del store._delete_record
    (key,) = store.items
    store.items[key]["status"] = "INPROGRESS"
    return key


def test_store_errors_become_persistence_errors(clock: ManualClock) -> None:
    """Whatever the store raises reaches the caller as our error, with the original as cause."""
    store = DictStore(clock)

    def broken(data_record: DataRecord) -> None:
        raise ConnectionError("down")

    store._put_record = broken  # type: ignore[method-assign]

    @idempotent_function(data_keyword_argument="order", persistence_store=store)
    def process(order: dict[str, Any]) -> str:
        raise AssertionError("the body must not run when the claim fails")

    with pytest.raises(IdempotencyPersistenceLayerError) as raised:
        process(order={"id": 1})
    assert isinstance(raised.value.__cause__, ConnectionError)


def test_records_read_back_from_boto3_resources_convert(clock: ManualClock) -> None:
    """Decimal numbers (what boto3 resources return) and empty strings read back cleanly."""
    store = DictStore(clock)
    store.items["k"] = {
        "id": "k",
        "status": "COMPLETED",
        "expiration": decimal.Decimal(1_900_000_000),
        "data": '{"a":1}',
        "validation": "",
    }

    record = store.get("k")

    assert record is not None
    expected = ("k", 1_900_000_000, None, '{"a":1}', None)
    actual = (
        record.idempotency_key,
        record.expiry_timestamp,
        record.in_progress_expiry_timestamp,
        record.response_data,
        record.payload_hash,
    )
    assert expected == actual
    assert store.get("missing") is None


def test_unknown_status_is_a_typed_error(clock: ManualClock) -> None:
    """A record with a status neither library writes raises `IdempotencyInvalidStatusError`."""
    store = DictStore(clock)
    store.items["k"] = {"id": "k", "status": "DONE", "expiration": 1}

    with pytest.raises(IdempotencyInvalidStatusError):
        store.get("k")


def test_data_record_has_powertools_semantics() -> None:
    """``DataRecord`` derives EXPIRED, decodes its result and reports its expiry."""
    live = DataRecord("k", status="COMPLETED", expiry_timestamp=4_000_000_000, response_data="[1]")
    expired = DataRecord("k", status="INPROGRESS", expiry_timestamp=1)

    assert ("COMPLETED", [1], 2096) == (
        live.status,
        live.response_json_as_dict(),
        live.get_expiration_datetime().year if live.get_expiration_datetime() else None,
    )
    assert ("EXPIRED", None) == (expired.status, expired.response_json_as_dict())
    with pytest.raises(IdempotencyInvalidStatusError):
        _ = DataRecord("k", status="BOGUS").status
