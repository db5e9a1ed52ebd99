"""Output serializers in Powertools' documented style: dataclass, pydantic and custom dict."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent_function
from idempotent_lambda.serialization.custom_dict import CustomDictSerializer
from idempotent_lambda.serialization.dataclass import DataclassSerializer
from idempotent_lambda.serialization.pydantic import PydanticSerializer

dynamodb = DynamoDBPersistenceLayer(table_name="IdempotencyTable")
config = IdempotencyConfig(event_key_jmespath="order_id")
processed: list[str] = []


@dataclass
class OrderItem:
    sku: str
    description: str


@dataclass
class Order:
    item: OrderItem
    order_id: int


@dataclass
class OrderOutput:
    order_id: int


class PydanticItem(BaseModel):
    sku: str
    description: str


class PydanticOrder(BaseModel):
    item: PydanticItem
    order_id: int


class PydanticOutput(BaseModel):
    order_id: int


class PlainOutput:
    def __init__(self, order_id: int) -> None:
        self.order_id = order_id


@idempotent_function(
    data_keyword_argument="order",
    config=config,
    persistence_store=dynamodb,
    output_serializer=DataclassSerializer,
)
def deduced_dataclass(order: Order) -> OrderOutput:
    processed.append("deduced_dataclass")
    return OrderOutput(order_id=order.order_id)


@idempotent_function(
    data_keyword_argument="order",
    config=config,
    persistence_store=dynamodb,
    output_serializer=DataclassSerializer(model=OrderOutput),
)
def explicit_dataclass(order: Order):  # type: ignore[no-untyped-def]
    processed.append("explicit_dataclass")
    return OrderOutput(order_id=order.order_id)


@idempotent_function(
    data_keyword_argument="order",
    config=config,
    persistence_store=dynamodb,
    output_serializer=PydanticSerializer,
)
def deduced_pydantic(order: PydanticOrder) -> PydanticOutput:
    processed.append("deduced_pydantic")
    return PydanticOutput(order_id=order.order_id)


@idempotent_function(
    data_keyword_argument="order",
    config=config,
    persistence_store=dynamodb,
    output_serializer=PydanticSerializer(model=PydanticOutput),
)
def explicit_pydantic(order: PydanticOrder):  # type: ignore[no-untyped-def]
    processed.append("explicit_pydantic")
    return PydanticOutput(order_id=order.order_id)


custom_serializer = CustomDictSerializer(
    to_dict=lambda output: {"order_id": output.order_id},
    from_dict=lambda data: PlainOutput(**data),
)


@idempotent_function(
    data_keyword_argument="order",
    config=config,
    persistence_store=dynamodb,
    output_serializer=custom_serializer,
)
def custom_dict(order: Order) -> PlainOutput:
    processed.append("custom_dict")
    return PlainOutput(order_id=order.order_id)


@pytest.fixture(autouse=True)
def table(make_table: Callable[..., str], point_at: Any) -> None:
    """Point the app at a fresh table."""
    point_at(dynamodb, make_table())
    processed.clear()


DATACLASS_ORDER = Order(item=OrderItem(sku="fake", description="sample"), order_id=1)
PYDANTIC_ORDER = PydanticOrder(item=PydanticItem(sku="fake", description="sample"), order_id=1)


@pytest.mark.parametrize(
    ("function", "order", "output_type"),
    [
        (deduced_dataclass, DATACLASS_ORDER, OrderOutput),
        (explicit_dataclass, DATACLASS_ORDER, OrderOutput),
        (deduced_pydantic, PYDANTIC_ORDER, PydanticOutput),
        (explicit_pydantic, PYDANTIC_ORDER, PydanticOutput),
        (custom_dict, DATACLASS_ORDER, PlainOutput),
    ],
    ids=[
        "dataclass-deduced",
        "dataclass-explicit",
        "pydantic-deduced",
        "pydantic-explicit",
        "custom",
    ],
)
def test_replay_rebuilds_the_output_type(function: Any, order: Any, output_type: type) -> None:
    """The replayed output is an instance of the function's output type, with its fields."""
    first = function(order=order)
    replay = function(order=order)

    assert (output_type, output_type) == (type(first), type(replay))
    assert 1 == replay.order_id
    assert [function.__name__] == processed
