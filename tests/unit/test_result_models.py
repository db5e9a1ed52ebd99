"""Dataclass and pydantic results are always storable, and replay as what the types describe.

Stored: the dict form Powertools stores (``asdict`` / JSON-mode dump), wherever the models are
in the result. Rebuilt on replay: whatever the return annotation or ``output_serializer`` says
(``Optional``, lists, dicts, nested dataclass fields); otherwise they replay as dicts.
"""

from __future__ import annotations

import dataclasses
import decimal
import functools
import json
from typing import Any, Optional

import pydantic
import pytest

from idempotent_lambda import (
    IdempotencyConfig,
    IdempotencyConfigError,
    IdempotencyPersistenceLayerError,
    InMemoryPersistenceLayer,
    idempotent,
    idempotent_function,
)
from idempotent_lambda.exceptions import (
    IdempotencyCorruptRecordError,
    IdempotencyModelTypeError,
    IdempotencyNoSerializationModelError,
)
from idempotent_lambda.serialization.custom_dict import CustomDictSerializer
from idempotent_lambda.serialization.dataclass import DataclassSerializer
from idempotent_lambda.serialization.functions import get_actual_type
from idempotent_lambda.serialization.pydantic import PydanticSerializer


@dataclasses.dataclass
class Line:
    """A nested dataclass."""

    sku: str
    qty: int


@dataclasses.dataclass
class Order:
    """A dataclass result with a nested dataclass list and a Decimal."""

    order_id: int
    lines: list[Line]
    total: decimal.Decimal = decimal.Decimal("0")


NATIVE = IdempotencyConfig(record_format="native")
"""Where a dataclass's Decimal field must replay as a Decimal: the default replays its text."""


class Invoice(pydantic.BaseModel):
    """A pydantic result."""

    invoice_id: int
    amount: decimal.Decimal


ORDER = Order(7, [Line("a", 1), Line("b", 2)], decimal.Decimal("9.90"))


def _twice(function: Any, payload: Any) -> tuple[Any, Any, list[Any]]:
    """Call ``function`` twice with one payload; return both answers and the body's runs."""
    first = function(payload)
    replay = function(payload)
    return first, replay, function.runs


def _decorate(store: InMemoryPersistenceLayer, body: Any, **options: Any) -> Any:
    runs: list[Any] = []

    def counted(payload: Any) -> Any:
        runs.append(payload)
        return body(payload)

    counted.__annotations__ = dict(body.__annotations__)
    counted.__qualname__ = body.__qualname__
    decorated = idempotent_function(
        data_keyword_argument="payload", persistence_store=store, **options
    )(counted)
    decorated.runs = runs  # type: ignore[attr-defined]
    return decorated


def test_optional_dataclass_annotation_rebuilds_and_keeps_none() -> None:
    """``-> Optional[Order]`` stores the order, replays an Order, and None replays as None."""
    store = InMemoryPersistenceLayer()

    def find(payload: int) -> Optional[Order]:  # noqa: UP045 - the spelling under test
        return ORDER if payload == 1 else None

    function = _decorate(store, find, config=NATIVE)  # the Decimal total replays exactly
    first, replay, runs = _twice(function, 1)
    none_first, none_replay, _ = _twice(function, 2)

    assert (ORDER, ORDER, [1, 2]) == (first, replay, runs)
    assert isinstance(replay.lines[0], Line)
    assert (None, None) == (none_first, none_replay)


def test_list_of_dataclasses_annotation_rebuilds_each() -> None:
    """``-> list[Order]`` replays a list of Orders with their nested Lines."""
    store = InMemoryPersistenceLayer()

    def orders(payload: int) -> list[Order]:
        return [ORDER, dataclasses.replace(ORDER, order_id=8)]

    first, replay, runs = _twice(_decorate(store, orders, config=NATIVE), 1)

    assert first == replay
    assert [Order, Order] == [type(item) for item in replay]
    assert 1 == len(runs)


def test_dict_and_union_with_none_of_pydantic_models() -> None:
    """``-> dict[str, Invoice | None]`` validates every model back, None stays None."""
    store = InMemoryPersistenceLayer()

    def invoices(payload: int) -> dict[str, Invoice | None]:
        return {"a": Invoice(invoice_id=1, amount=decimal.Decimal("2.50")), "b": None}

    first, replay, _ = _twice(_decorate(store, invoices), 1)

    assert first == replay
    assert isinstance(replay["a"], Invoice)


def test_no_annotation_stores_the_dict_form_and_replays_dicts() -> None:
    """Without annotation or serializer a dataclass result is stored (as Powertools stores it)."""
    store = InMemoryPersistenceLayer()

    def plain(payload):  # type: ignore[no-untyped-def]
        return {"order": ORDER, "invoices": [Invoice(invoice_id=1, amount=decimal.Decimal("1"))]}

    first, replay, runs = _twice(_decorate(store, plain, config=NATIVE), 1)

    assert first["order"] is ORDER
    expected = {
        "order": {
            "order_id": 7,
            "lines": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}],
            "total": decimal.Decimal("9.90"),
        },
        "invoices": [{"invoice_id": 1, "amount": "1"}],
    }
    assert expected == replay
    assert 1 == len(runs)


def test_handler_returning_a_dataclass_is_stored() -> None:
    """``@idempotent`` (NoOp serializer) stores a dataclass result; a retry gets its dict form."""
    store = InMemoryPersistenceLayer()
    runs: list[int] = []

    @idempotent(persistence_store=store)
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(1)
        return Line("a", 1)

    first = handler({"id": 1}, None)
    replay = handler({"id": 1}, None)

    assert (Line("a", 1), {"sku": "a", "qty": 1}, [1]) == (first, replay, runs)


@pytest.mark.parametrize("serializer", [DataclassSerializer, DataclassSerializer(Optional[Order])])  # noqa: UP045
def test_dataclass_serializer_with_optional(serializer: Any) -> None:
    """The serializer class takes ``Optional[Order]`` from the annotation; None passes through."""
    store = InMemoryPersistenceLayer()

    def find(payload: int) -> Optional[Order]:  # noqa: UP045
        return None if payload == 0 else ORDER

    function = _decorate(store, find, config=NATIVE, output_serializer=serializer)

    assert (ORDER, ORDER) == _twice(function, 1)[:2]
    assert (None, None) == _twice(function, 0)[:2]
    assert isinstance(function(1).lines[1], Line)


def test_pydantic_serializer_with_a_list() -> None:
    """``PydanticSerializer`` built from ``-> list[Invoice]`` rebuilds every model."""
    store = InMemoryPersistenceLayer()

    def invoices(payload: int) -> list[Invoice]:
        return [Invoice(invoice_id=payload, amount=decimal.Decimal("1.5"))]

    first, replay, _ = _twice(_decorate(store, invoices, output_serializer=PydanticSerializer), 3)

    assert first == replay
    assert isinstance(replay[0], Invoice)


def test_model_serializer_errors_are_config_errors() -> None:
    """No annotation, or no model in it, fails at decoration time with Powertools' names."""
    store = InMemoryPersistenceLayer()

    def untyped(payload):  # type: ignore[no-untyped-def]
        return None

    def wrong(payload: int) -> dict[str, int]:
        return {}

    with pytest.raises(IdempotencyNoSerializationModelError):
        _decorate(store, untyped, output_serializer=DataclassSerializer)
    with pytest.raises(IdempotencyModelTypeError):
        _decorate(store, wrong, output_serializer=PydanticSerializer)
    assert issubclass(IdempotencyModelTypeError, IdempotencyConfigError)


def test_custom_dict_serializer_is_not_called_for_none() -> None:
    """A None result stores and replays as None without calling the user's functions."""
    store = InMemoryPersistenceLayer()
    calls: list[str] = []
    serializer = CustomDictSerializer(
        to_dict=lambda value: calls.append("to") or {"v": value},
        from_dict=lambda data: calls.append("from") or data["v"],
    )

    def maybe(payload: int) -> Any:
        return None if payload == 0 else payload

    function = _decorate(store, maybe, output_serializer=serializer)

    assert (None, None, 5, 5) == (*_twice(function, 0)[:2], *_twice(function, 5)[:2])
    assert ["to", "from"] == calls


def test_stored_form_is_powertools_json() -> None:
    """The stored text of a dataclass result is the JSON Powertools would store for it."""
    store = InMemoryPersistenceLayer()

    def line(payload: int) -> Line:
        return Line("a", payload)

    _decorate(store, line)(4)
    (record,) = [store.get(key) for key in store._records]

    assert record is not None
    assert {"sku": "a", "qty": 4} == json.loads(record.response_data or "")


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [(Optional[Order], Order), (Order | None, Order), (list[Order], list[Order])],  # noqa: UP045
)
def test_get_actual_type_strips_none(annotation: Any, expected: Any) -> None:
    """``get_actual_type`` removes ``None`` from a union and leaves other types alone."""
    assert expected == get_actual_type(annotation)


def test_get_actual_type_refuses_a_real_union() -> None:
    """A union of two types is not one model type."""
    with pytest.raises(IdempotencyModelTypeError):
        get_actual_type(int | str)


def _replay_as(stored: Any, annotation: Any) -> Any:
    """Store ``stored`` as an earlier, unannotated version of a function did, then replay it
    through the current version, annotated ``-> annotation``; return what the replay gives."""
    store = InMemoryPersistenceLayer()
    decorate = idempotent_function(
        data_keyword_argument="payload", persistence_store=store, key_prefix="receipts"
    )

    def earlier(payload):  # type: ignore[no-untyped-def]
        return stored

    def current(payload: int) -> Any:
        raise AssertionError("the stored result replays")

    current.__annotations__["return"] = annotation
    assert stored == decorate(earlier)(payload=1)
    return decorate(current)(payload=1)


@pytest.mark.parametrize("stored", ["SECRET", ["SECRET"], 4111, {"sku": "SECRET"}], ids=repr)
@pytest.mark.parametrize("model", [Line, Invoice], ids=["dataclass", "pydantic"])
def test_a_stored_value_that_is_not_the_annotated_model_is_refused(
    model: type[Any], stored: Any
) -> None:
    """Regression: a function annotated ``-> Line`` (or a pydantic model) replayed a stored str,
    list or int unchanged, and a dict of other fields raised a raw TypeError or pydantic's
    ValidationError. Each is now `IdempotencyCorruptRecordError`, naming the type, never the
    stored value."""
    with pytest.raises(IdempotencyCorruptRecordError, match=model.__name__) as refused:
        _replay_as(stored, model)
    message = str(refused.value)
    assert "SECRET" not in message
    assert "4111" not in message
    assert isinstance(refused.value, IdempotencyPersistenceLayerError)


@pytest.mark.parametrize("stored", ["text", {"sku": "a", "qty": 1}], ids=repr)
@pytest.mark.parametrize("annotation", [list[Line], Optional[list[Line]]], ids=str)  # noqa: UP045
def test_a_list_annotation_refuses_a_stored_value_that_is_not_a_list(
    annotation: Any, stored: Any
) -> None:
    """``-> list[Line]`` does not replay a stored str or dict as if it were the list."""
    with pytest.raises(IdempotencyCorruptRecordError, match="list"):
        _replay_as(stored, annotation)


def test_matching_stored_values_still_replay() -> None:
    """What the annotation describes replays rebuilt; None replays as None where allowed."""
    assert Line("a", 1) == _replay_as({"sku": "a", "qty": 1}, Line)
    assert [Line("a", 1)] == _replay_as([{"sku": "a", "qty": 1}], list[Line])
    assert _replay_as(None, Optional[Line]) is None  # noqa: UP045


class Receipts:
    """A callable object whose ``__call__`` is annotated with a model."""

    def __call__(self, payload: int) -> Line:
        return Line("a", payload)


def annotated_line(payload: int, qty: int) -> Line:
    return Line("p", qty)


@pytest.mark.parametrize(
    "function",
    [Receipts(), functools.partial(annotated_line, qty=3)],
    ids=["callable-object", "partial"],
)
def test_callable_objects_and_partials_replay_their_annotated_model(function: Any) -> None:
    """The return annotation of ``__call__``, or of a partial's function, rebuilds the model."""
    decorated = idempotent_function(
        data_keyword_argument="payload", persistence_store=InMemoryPersistenceLayer()
    )(function)

    first, replay = decorated(payload=1), decorated(payload=1)

    assert first == replay
    assert isinstance(replay, Line)
