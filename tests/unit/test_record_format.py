"""The default format derives keys, validation hashes and stored results as Powertools does.

Each check runs Powertools' own code (a dev dependency) on the same input and compares. The
rest: what holds about failures under the default as under the native format (unstorable
results, marker look-alikes), and how Powertools' layouts hold an unstorable result's marker.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import json
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idempotent_lambda import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    IdempotencyConfigError,
    IdempotencyRecord,
    IdempotencyUnstorableResultError,
    Status,
    idempotent,
)
from idempotent_lambda._entry import default_prefix
from idempotent_lambda._identity import derive_invocation
from idempotent_lambda._record_format import (
    MAX_STORED_DATA_BYTES,
    POWERTOOLS,
    hold_unstorable,
    release_unstorable,
)
from idempotent_lambda.persistence.in_memory import InMemoryPersistenceLayer
from idempotent_lambda.testing import ManualClock

powertools = pytest.importorskip("aws_lambda_powertools.utilities.idempotency")
from aws_lambda_powertools.shared.json_encoder import Encoder  # noqa: E402
from aws_lambda_powertools.utilities.idempotency.persistence.base import (  # noqa: E402
    BasePersistenceLayer,
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


class _Layer(BasePersistenceLayer):
    """Powertools' base layer with its hashing and nothing stored."""

    def _get_record(self, idempotency_key: Any) -> Any:
        raise NotImplementedError

    def _put_record(self, data_record: Any) -> None:
        raise NotImplementedError

    def _update_record(self, data_record: Any) -> None:
        raise NotImplementedError

    def _delete_record(self, data_record: Any) -> None:
        raise NotImplementedError


def powertools_layer(function_name: str, **options: Any) -> _Layer:
    layer = _Layer()
    layer.configure(powertools.IdempotencyConfig(**options), function_name=function_name)
    return layer


@dataclasses.dataclass
class Order:
    id: str
    amount: decimal.Decimal


@given(JSON)
def test_digest_is_powertools_own_for_any_json_value(value: Any) -> None:
    """Any JSON value (NaN and unicode included) hashes to Powertools' digest, md5 and sha256."""
    for name in ("md5", "sha256"):
        layer = powertools_layer("f", hash_function=name)

        assert layer._generate_hash(value) == POWERTOOLS.digest(name, value)


@pytest.mark.parametrize(
    "value",
    [
        decimal.Decimal("1.10"),
        {"when": datetime.date(2026, 12, 1), "at": datetime.time(5, 6)},
        {"id": uuid.UUID(int=7), "n": decimal.Decimal("NaN")},
        Order("a", decimal.Decimal("2.5")),
        ["é", "\u2028", 1.0, 1],
    ],
)
def test_digest_of_non_json_values_is_powertools_own(value: Any) -> None:
    """Decimal, dates, UUIDs and dataclasses hash as Powertools' key encoder renders them."""
    assert powertools_layer("f")._generate_hash(value) == POWERTOOLS.digest("md5", value)


@pytest.mark.parametrize(
    ("options", "event"),
    [
        ({}, {"body": '{"order": 1}', "headers": {"x": "y"}}),
        ({"event_key_jmespath": "powertools_json(body).order"}, {"body": '{"order": 12}'}),
        (
            {"event_key_jmespath": "[id, amount]", "payload_validation_jmespath": "amount"},
            {"id": "o-1", "amount": 3},
        ),
        ({"event_key_jmespath": "id", "hash_function": "sha256"}, {"id": "o-2"}),
    ],
)
def test_key_and_validation_hash_are_powertools_own(
    options: dict[str, Any], event: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The full key ``{function}.{module}.{qualname}#{digest}`` and the validation hash match."""
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "orders")

    def handler(event: Any, context: Any) -> None: ...

    layer = powertools_layer(f"{handler.__module__}.{handler.__qualname__}", **options)
    config = IdempotencyConfig(record_format="powertools", **options)
    prefix = default_prefix(handler, config.format)
    invocation = derive_invocation(config, event, prefix=prefix, now_ms=0, context=None)

    assert invocation is not None
    assert layer._get_hashed_idempotency_key(event) == invocation.key
    expected_hash = layer._get_hashed_payload(event) if layer.payload_validation_enabled else None
    assert expected_hash == invocation.payload_hash


@pytest.mark.parametrize("name", [None, ""])
def test_prefix_without_a_function_name_is_powertools_own(
    name: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unset, Powertools says ``test-func``; set but empty, it keeps the empty name."""
    if name is None:
        monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    else:
        monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", name)

    def handler(event: Any, context: Any) -> None: ...

    path = f"{handler.__module__}.{handler.__qualname__}"
    layer = powertools_layer(path)
    expected = layer._get_hashed_idempotency_key({"a": 1}).rpartition("#")[0]

    assert expected == default_prefix(handler, POWERTOOLS)


@pytest.mark.parametrize(
    "result",
    [
        {"b": 1, "a": [1.5, "é", None]},
        {"total": decimal.Decimal("10.50")},
        Order("a", decimal.Decimal("2.5")),
        0,
        "",
        None,
    ],
)
def test_stored_result_is_powertools_own_text(result: Any) -> None:
    """A result is stored as the very text Powertools writes, and reads back as JSON."""
    expected = json.dumps(result, cls=Encoder, sort_keys=True)

    assert expected == POWERTOOLS.encode_result(result)
    assert json.loads(expected) == POWERTOOLS.decode_result(expected)


@pytest.mark.parametrize("record_format", ["powertools", "native"])
def test_a_store_without_format_views_keeps_records_as_given(record_format: str) -> None:
    """A custom store with no ``with_record_format`` serves every format, the default included."""
    inner = InMemoryPersistenceLayer(clock=ManualClock())

    class PlainStore:
        clock = inner.clock
        claim, complete, release, get = inner.claim, inner.complete, inner.release, inner.get

    calls: list[Any] = []
    config = IdempotencyConfig(record_format=record_format)  # type: ignore[arg-type]

    @idempotent(persistence_store=PlainStore(), config=config, key_prefix="p")
    def handler(event: Any, context: Any) -> Any:
        calls.append(event)
        return {"ok": True}

    assert [{"ok": True}] * 2 == [handler({"id": 1}, None) for _ in range(2)]
    assert 1 == len(calls)
    (key,) = inner._records
    assert f"p#{config.format.digest(config.hash_name, {'id': 1})}" == key


def test_powertools_format_runs_the_lifecycle_in_memory() -> None:
    """First call runs, a retry replays the Powertools-encoded result (Decimal as its text)."""
    calls: list[Any] = []
    store = InMemoryPersistenceLayer(clock=ManualClock())

    @idempotent(persistence_store=store, config=IdempotencyConfig(record_format="powertools"))
    def handler(event: Any, context: Any) -> Any:
        calls.append(event)
        return {"total": decimal.Decimal("1.10")}

    first = handler({"id": 1}, None)
    replay = handler({"id": 1}, None)

    assert {"total": decimal.Decimal("1.10")} == first
    assert {"total": "1.10"} == replay
    assert 1 == len(calls)


class _ExplodingMapping(dict[str, Any]):
    def items(self) -> Any:
        raise RuntimeError("items() failed")


@pytest.mark.parametrize(
    "result",
    [_ExplodingMapping(a=1), {"a": {1, 2}}, {"a": object()}, "x" * MAX_STORED_DATA_BYTES],
    ids=["items-raises", "set", "object", "over-the-limit"],
)
def test_an_unstorable_result_is_typed_and_never_runs_again_by_default(result: Any) -> None:
    """Encoding that raises, or JSON over 400,000 bytes: the typed error, then no second run."""
    calls: list[Any] = []
    store = InMemoryPersistenceLayer(clock=ManualClock())

    @idempotent(persistence_store=store)
    def handler(event: Any, context: Any) -> Any:
        calls.append(event)
        return result

    for _ in range(2):
        with pytest.raises(IdempotencyUnstorableResultError):
            handler({"id": 1}, None)

    assert 1 == len(calls)
    ((record, compressed),) = store._records.values()
    assert (Status.COMPLETED, None) == (record.status, compressed)  # a marker, never zlib bytes
    assert POWERTOOLS.unstorable_reason(record.response_data or "") is not None


@pytest.mark.parametrize(
    "result",
    [
        {"$unstorable": "chosen\nby the client"},
        {"$s3": {"bucket": "b", "key": "k", "sha256": "0", "size": 1}},
        "$unstorable:not a marker either",
        {"$decimal": "1.10"},
    ],
    ids=["native-marker", "s3-reference", "marker-text", "native-wrapper"],
)
def test_a_result_that_reads_like_a_marker_replays_as_itself_by_default(result: Any) -> None:
    """Under the default format a stored result is the user's data, always."""
    calls: list[Any] = []

    @idempotent(persistence_store=InMemoryPersistenceLayer(clock=ManualClock()))
    def handler(event: Any, context: Any) -> Any:
        calls.append(event)
        return result

    assert [result, result] == [handler({"id": 1}, None) for _ in range(2)]
    assert 1 == len(calls)


def test_the_marker_is_held_in_progress_until_the_expiration_and_read_back() -> None:
    """Powertools' layouts store the marker as an IN_PROGRESS record Powertools refuses."""
    marker = POWERTOOLS.unstorable_marker("too large")
    completed = IdempotencyRecord("k", Status.COMPLETED, 1_000, None, marker, "h", "o")

    held, reason = hold_unstorable(completed)

    assert (Status.IN_PROGRESS, 1_001_000, None, "too large") == (
        held.status,
        held.in_progress_expiry_timestamp,
        held.response_data,
        reason,
    )
    assert completed == release_unstorable(held, reason)
    plain = IdempotencyRecord("k", Status.COMPLETED, 1_000, None, '"$unstorable:x"')
    assert (plain, None) == hold_unstorable(plain)  # a JSON string result is data


def test_offloading_stores_refuse_the_default_format_at_decoration() -> None:
    """``large_result_bucket`` is native only: with the default config it is a config error."""
    store = DynamoDBPersistenceLayer("t", large_result_bucket="results", boto3_client=object())  # type: ignore[arg-type]

    with pytest.raises(IdempotencyConfigError, match="large_result_bucket"):
        idempotent(persistence_store=store)(lambda event, context: None)
    idempotent(persistence_store=store, config=IdempotencyConfig(record_format="native"))(
        lambda event, context: None
    )
