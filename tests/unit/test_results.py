"""Results replay exactly (falsy, Decimal, nesting, dataclasses, pydantic) or fail clearly.

Exact replay of values that are not JSON is the native format's (``NATIVE``, the opt-in); the
default format's replay is the JSON reading of a result (tests/unit/test_record_format.py).
"""

from __future__ import annotations

import base64
import dataclasses
import decimal
import os
from typing import Any

import pydantic
import pytest

from idempotent_lambda import (
    IdempotencyConfig,
    IdempotencyConfigError,
    IdempotencyUnstorableResultError,
    InMemoryPersistenceLayer,
    Status,
    idempotent,
    idempotent_function,
)
from idempotent_lambda._result_codec import decode_result, encode_result
from idempotent_lambda.serialization import DataclassSerializer, PydanticSerializer
from idempotent_lambda.testing import FakeLambdaContext
from tests.unit._doubles import Decisions, Runs

EVENT = {"order_id": 7}
NATIVE = IdempotencyConfig(record_format="native")


@dataclasses.dataclass(frozen=True)
class Receipt:
    """A dataclass result."""

    order_id: int
    total: decimal.Decimal
    lines: list[str]


class Invoice(pydantic.BaseModel):
    """A pydantic result."""

    order_id: int
    total: decimal.Decimal
    paid: bool = False


RESULTS = [
    pytest.param({}, id="empty-dict"),
    pytest.param([], id="empty-list"),
    pytest.param(0, id="zero"),
    pytest.param(0.0, id="zero-float"),
    pytest.param(False, id="false"),
    pytest.param("", id="empty-string"),
    pytest.param(None, id="none"),
    pytest.param(decimal.Decimal("1.10"), id="decimal-trailing-zero"),
    pytest.param(decimal.Decimal("-0.000"), id="decimal-negative-zero"),
    pytest.param(decimal.Decimal("1E+3"), id="decimal-exponent"),
    pytest.param(b"\x00\xffbinary", id="bytes"),
    pytest.param((1, "a", (2, 3)), id="nested-tuple"),
    pytest.param({1, 2, 3}, id="set"),
    pytest.param(frozenset({"a"}), id="frozenset"),
    pytest.param({frozenset({1, 2}), (3, frozenset())}, id="set-of-frozensets"),
    pytest.param({frozenset({"k"}): [1]}, id="frozenset-key"),
    pytest.param({"$decimal": "1.10", "$tuple": [1]}, id="dollar-keys"),
    pytest.param({"$decimal": "x"}, id="one-dollar-key"),
    pytest.param({1: "one", 2: {"two": [2]}}, id="int-keys"),
    pytest.param({(1, 2): "tuple key"}, id="tuple-key"),
    pytest.param({"a": {"b": [{}, [], 0, False, "", None]}}, id="nested-falsy"),
    pytest.param([decimal.Decimal("0.1"), 0.1, 10**30, -1], id="numbers"),
    pytest.param(float("inf"), id="infinity"),
    pytest.param("Zoë 東京 \u2028 😀", id="unicode"),
]


@pytest.mark.parametrize("value", RESULTS)
def test_results_round_trip_exactly(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext, value: Any
) -> None:
    """A replay returns a value equal to the first result, of the same type."""
    runs = Runs()

    @idempotent(persistence_store=idempotency_store, config=NATIVE)
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs(event)
        return value

    first = handler(EVENT, lambda_context)
    replay = handler(EVENT, lambda_context)

    assert value == replay
    assert type(value) is type(replay)
    assert first is value
    assert 1 == runs.count


def test_decimal_replays_with_its_exact_text(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """``Decimal("1.10")`` comes back as ``Decimal("1.10")``, not ``1.1``."""

    @idempotent(persistence_store=idempotency_store, config=NATIVE)
    def handler(event: dict[str, Any], context: Any) -> Any:
        return {"total": decimal.Decimal("1.10")}

    handler(EVENT, lambda_context)

    assert "1.10" == str(handler(EVENT, lambda_context)["total"])


def test_nan_result_replays_as_nan(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A NaN float result is stored and replays as NaN."""

    @idempotent(persistence_store=idempotency_store)
    def handler(event: dict[str, Any], context: Any) -> Any:
        return float("nan")

    handler(EVENT, lambda_context)
    replay = handler(EVENT, lambda_context)

    assert replay != replay  # noqa: PLR0124 - NaN is the one value not equal to itself


def test_stored_format_is_documented_json() -> None:
    """The stored text is plain JSON with ``$``-tagged wrappers for non-JSON values."""
    value = {"a": decimal.Decimal("1.10"), "b": (1,), "$c": 0}

    text = encode_result(value)

    assert '{"$map":[["a",{"$decimal":"1.10"}],["b",{"$tuple":[1]}],["$c",0]]}' == text
    assert value == decode_result(text)


def test_dataclass_result_with_a_serializer_class(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """``output_serializer=Receipt`` stores the dataclass and rebuilds it on replay."""

    @idempotent_function(
        data_keyword_argument="order",
        persistence_store=idempotency_store,
        config=NATIVE,
        output_serializer=Receipt,
    )
    def process(order: dict[str, Any]) -> Any:
        return Receipt(order["order_id"], decimal.Decimal("9.90"), ["sku-1"])

    first = process(order=EVENT)
    replay = process(order=EVENT)

    assert first == replay
    assert isinstance(replay, Receipt)


def test_dataclass_result_with_a_serializer_object(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """``output_serializer=DataclassSerializer(model=Receipt)`` works like the class."""

    @idempotent_function(
        data_keyword_argument="order",
        persistence_store=idempotency_store,
        config=NATIVE,
        output_serializer=DataclassSerializer(model=Receipt),
    )
    def process(order: dict[str, Any]) -> Any:
        return Receipt(order["order_id"], decimal.Decimal("9.90"), [])

    first = process(order=EVENT)

    assert first == process(order=EVENT)


def test_dataclass_result_from_the_return_annotation(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """With no serializer, a dataclass return annotation is enough."""
    runs = Runs()

    @idempotent_function(
        data_keyword_argument="order", persistence_store=idempotency_store, config=NATIVE
    )
    def process(order: dict[str, Any]) -> Receipt:
        runs(order)
        return Receipt(order["order_id"], decimal.Decimal("0.00"), ["a", "b"])

    first = process(order=EVENT)
    replay = process(order=EVENT)

    assert Receipt(7, decimal.Decimal("0.00"), ["a", "b"]) == replay
    assert first == replay
    assert 1 == runs.count


@pytest.mark.parametrize(
    "serializer",
    [Invoice, PydanticSerializer(model=Invoice), PydanticSerializer, None],
    ids=["model-class", "serializer-object", "serializer-class", "annotation"],
)
def test_pydantic_result_round_trips(
    idempotency_store: InMemoryPersistenceLayer, serializer: Any
) -> None:
    """A pydantic result comes back as an equal model instance, however the serializer is given."""

    @idempotent_function(
        data_keyword_argument="order",
        persistence_store=idempotency_store,
        output_serializer=serializer,
    )
    def process(order: dict[str, Any]) -> Invoice:
        return Invoice(order_id=order["order_id"], total=decimal.Decimal("12.50"), paid=True)

    first = process(order=EVENT)
    replay = process(order=EVENT)

    assert first == replay
    assert isinstance(replay, Invoice)


def test_dataclass_serializer_class_uses_the_return_annotation(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """``output_serializer=DataclassSerializer`` (Powertools' form) takes the annotated model."""

    @idempotent_function(
        data_keyword_argument="order",
        persistence_store=idempotency_store,
        output_serializer=DataclassSerializer,
    )
    def process(order: dict[str, Any]) -> Receipt:
        return Receipt(1, decimal.Decimal(1), [])

    process(order=EVENT)

    assert isinstance(process(order=EVENT), Receipt)


def test_serializer_class_without_return_annotation_is_a_config_error(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """A serializer class needs a return annotation to know its model: error at decoration."""
    decorate = idempotent_function(
        data_keyword_argument="order",
        persistence_store=idempotency_store,
        output_serializer=PydanticSerializer,
    )

    def process(order: dict[str, Any]):  # type: ignore[no-untyped-def]
        return order

    with pytest.raises(IdempotencyConfigError):
        decorate(process)


@pytest.mark.parametrize("bad", [int, object(), "Invoice"], ids=["int", "object", "string"])
def test_unusable_output_serializer_is_a_config_error(
    idempotency_store: InMemoryPersistenceLayer, bad: Any
) -> None:
    """A serializer that is not a serializer, dataclass or model fails at decoration time."""
    decorate = idempotent_function(
        data_keyword_argument="order",
        persistence_store=idempotency_store,
        output_serializer=bad,
    )

    with pytest.raises(IdempotencyConfigError):
        decorate(lambda order: order)


def test_serializer_models_must_be_the_right_kind() -> None:
    """``DataclassSerializer`` needs a dataclass, ``PydanticSerializer`` a model class."""
    with pytest.raises(IdempotencyConfigError):
        DataclassSerializer(model=Invoice)
    with pytest.raises(IdempotencyConfigError):
        PydanticSerializer(model=Receipt)


class Opaque:
    """A result with no stored form."""


def _unserialisable() -> Any:
    return {"ok": Opaque()}


def _too_large() -> Any:
    return base64.b64encode(os.urandom(1_500_000)).decode()  # 2 MB that does not compress


@pytest.mark.parametrize("make_result", [_unserialisable, _too_large], ids=["opaque", "2MB"])
def test_unstorable_result_raises_and_retries_do_not_run_again(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
    make_result: Any,
) -> None:
    """An unstorable result raises; the record is not left IN_PROGRESS; a retry raises too."""
    runs = Runs()

    @idempotent(
        persistence_store=idempotency_store,
        config=IdempotencyConfig(decision_hook=decisions),
        key_prefix="orders",
    )
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs(event)
        return make_result()

    with pytest.raises(IdempotencyUnstorableResultError):
        handler(EVENT, lambda_context)
    record = idempotency_store.get(decisions.last.key or "")
    with pytest.raises(IdempotencyUnstorableResultError):
        handler(EVENT, lambda_context)

    assert record is not None
    assert Status.COMPLETED == record.status
    assert 1 == runs.count
    assert ["UNSTORABLE", "REPLAYED"] == decisions.outcomes


def test_failing_output_serializer_makes_the_result_unstorable(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """A serializer whose ``to_dict`` raises yields `IdempotencyUnstorableResultError`."""

    class Broken:
        def to_dict(self, data: Any) -> Any:
            raise ValueError("cannot")

        def from_dict(self, data: Any) -> Any:
            return data

    runs = Runs()

    @idempotent_function(
        data_keyword_argument="order",
        persistence_store=idempotency_store,
        output_serializer=Broken(),
    )
    def process(order: dict[str, Any]) -> Any:
        runs(order)
        return "value"

    with pytest.raises(IdempotencyUnstorableResultError) as raised:
        process(order=EVENT)
    with pytest.raises(IdempotencyUnstorableResultError):
        process(order=EVENT)

    assert isinstance(raised.value.__cause__, ValueError)
    assert 1 == runs.count


def test_large_compressible_result_round_trips(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A result far above the item limit that compresses well is stored and replayed."""
    big = {"rows": [{"id": i, "name": "row"} for i in range(40_000)]}

    @idempotent(persistence_store=idempotency_store, config=NATIVE)
    def handler(event: dict[str, Any], context: Any) -> Any:
        return big

    handler(EVENT, lambda_context)

    assert big == handler(EVENT, lambda_context)
