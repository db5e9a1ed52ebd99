"""Committed test vectors of the stored key format (DESIGN §7a): inputs → canonical JSON → key.

The expected canonical texts were written by hand from the specification, and the digests are
sha256 of those texts. They are the native format's (``record_format="native"``, the opt-in).
The key is a stored format: if a vector changes, existing records stop matching their retries.
Never regenerate these from the implementation.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import hashlib
import uuid
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyConfig,
    IdempotencyConfigError,
    IdempotencyKeyError,
    InMemoryPersistenceLayer,
    idempotent,
    idempotent_function,
)
from idempotent_lambda._canonical import canonical_bytes, canonical_json
from idempotent_lambda.testing import FakeLambdaContext
from tests.unit._doubles import Decisions


class Color(enum.Enum):
    """A plain Enum."""

    RED = "red"


class Level(enum.IntEnum):
    """An IntEnum."""

    HIGH = 2


@dataclasses.dataclass
class Item:
    """Nested dataclass."""

    sku: str
    qty: int


@dataclasses.dataclass
class Order:
    """Outer dataclass."""

    order_id: int
    item: Item
    price: decimal.Decimal


# name: (input, canonical JSON, sha256 of the canonical JSON)
VECTORS: dict[str, tuple[Any, str, str]] = {
    "int-one": (1, "1", "6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b"),
    "float-one": (1.0, "1", "6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b"),
    "decimal-one": (
        decimal.Decimal("1.00"),
        "1",
        "6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b",
    ),
    "string-one": ("1", '"1"', "391552c099c101b131feaf24c5795a6a15bc8ec82015424e0d2b4274a369a0bf"),
    "float-one-point-ten": (
        1.10,
        "1.1",
        "b05e244762b1e472be89a93800cc3ee326743cecb55984bf12813addb8de66d0",
    ),
    "decimal-one-point-ten": (
        decimal.Decimal("1.10"),
        "1.1",
        "b05e244762b1e472be89a93800cc3ee326743cecb55984bf12813addb8de66d0",
    ),
    "1e20": (
        1e20,
        "100000000000000000000",
        "c344e9487bfbd5c4e03c9fb90d62a5dde5e00b54d55c46e9f4a803aea162b80c",
    ),
    "int-1e20": (
        10**20,
        "100000000000000000000",
        "c344e9487bfbd5c4e03c9fb90d62a5dde5e00b54d55c46e9f4a803aea162b80c",
    ),
    "negative-zero": (
        -0.0,
        "0",
        "5feceb66ffc86f38d952786c6d696c79c2dbc239dd4e91b46729d73a27fb57e9",
    ),
    "decimal-negative-zero": (
        decimal.Decimal("-0.00"),
        "0",
        "5feceb66ffc86f38d952786c6d696c79c2dbc239dd4e91b46729d73a27fb57e9",
    ),
    "small-float": (
        1.5e-7,
        "0.00000015",
        "6374969ec42b5ed9c40b0e124a7ca632fb32c89d44328a86a688de0d1d83b558",
    ),
    "decimal-negative": (
        decimal.Decimal("-1.50"),
        "-1.5",
        "37c2b212b94e5372b33df924ea2a91182d90c237d0bf942c1768e794ebef2376",
    ),
    "decimal-exponent": (
        decimal.Decimal("1E+3"),
        "1000",
        "40510175845988f13f6162ed8526f0b09f73384467fa855e1e79b44a56562a58",
    ),
    "big-int": (
        12345678901234567890,
        "12345678901234567890",
        "6ed645ef0e1abea1bf1e4e935ff04f9e18d39812387f63cda3415b46240f0405",
    ),
    "true-false-null": (
        [True, False, None],
        "[true,false,null]",
        "4d0f18de2133118249c26acc481838d4f6bb6bc1de882d99abbd19ae9397e8df",
    ),
    "bare-string": (
        "order-1",
        '"order-1"',
        "4b08242598e89818f98b9cf7ec0d8ee9033be2c56e579847b0d60b6db516f746",
    ),
    "escapes": (
        'a"b\\c\n\x01',
        '"a\\"b\\\\c\\n\\u0001"',
        "96af7ecfc7fc91ec1e45b58c09906a7b72fe4ba8554c3737730770f150604656",
    ),
    "non-ascii-unescaped": (
        {"name": "Zoë", "city": "東京"},
        '{"city":"東京","name":"Zoë"}',
        "08c12281482345712785faf858e8cd381eaf4890177f2133a750469e858d4904",
    ),
    "keys-by-code-point": (
        {"b": 1, "B": 2, "a": 3, "é": 4, "_": 5, "1": 6, "\uffff": 7, "😀": 8},
        '{"1":6,"B":2,"_":5,"a":3,"b":1,"é":4,"\uffff":7,"😀":8}',
        "bf31c1de15944a7b3b41d84a226cd71e3adae0175fb16f4340ab05b1ec4948e5",
    ),
    "nested-sorted": (
        {"b": {"c": "d"}, "a": [1, 2.0, {"y": 0, "x": None}]},
        '{"a":[1,2,{"x":null,"y":0}],"b":{"c":"d"}}',
        "1d2f983f3e088cba7c0e1e8493d1b43b5245c18c8f779728a7e311569527b01e",
    ),
    "bytes-base64": (
        b"\x00\xffhi",
        '"AP9oaQ=="',
        "3afb1822a872aeb0b26a1f5ae32672a3ff3b847199dd60d88e6f1ad2b232e1cd",
    ),
    "set-sorted": (
        {3, 1, 2},
        "[1,2,3]",
        "a615eeaee21de5179de080de8c3052c8da901138406ba71c38c032845f7d54f4",
    ),
    "set-sorted-by-canonical-text": (
        frozenset({9, 10, 1}),
        "[1,10,9]",
        "6f41d4c9f43f350c37e13a1827d987b48cb4bf652b523007fac9b1a2e9a6eb93",
    ),
    "set-of-strings": (
        {"b", "a"},
        '["a","b"]',
        "0473ef2dc0d324ab659d3580c1134e9d812035905c4781fdd6d529b0c6860e13",
    ),
    "tuple-as-list": (
        (1, "a", (2,)),
        '[1,"a",[2]]',
        "10de13d1af050af5e3d2f938d02648b922363b6cfef54c4221e035f20c8e4a47",
    ),
    "datetime": (
        datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
        '"2026-01-02T03:04:05+00:00"',
        "79e0efd148417f4f2095bd06dec6863187689d3a98129063a152017845738199",
    ),
    "date": (
        datetime.date(2026, 1, 2),
        '"2026-01-02"',
        "5dfe28dc540201810deee4b2457f71fcdc1c15dc9c9b5542824f16c675e203ba",
    ),
    "time": (
        datetime.time(3, 4, 5, 250),
        '"03:04:05.000250"',
        "320556ef85f799030052a4001899ceea592e12c38306f1f5288dd9d6a54cb8a7",
    ),
    "uuid": (
        uuid.UUID("12345678-1234-5678-1234-567812345678"),
        '"12345678-1234-5678-1234-567812345678"',
        "be6bf1ea57078ff17fa690d9c62d24fb803c8aac2368bb9088431187034a2cfe",
    ),
    "enum-values": (
        {"color": Color.RED, "level": Level.HIGH},
        '{"color":"red","level":2}',
        "5d3ef32f5e5b046c706bdb9abb1be6ed133665995515d9b3e255043e07013f4d",
    ),
    "nested-dataclass": (
        Order(order_id=7, item=Item(sku="A-1", qty=2), price=decimal.Decimal("9.90")),
        '{"item":{"qty":2,"sku":"A-1"},"order_id":7,"price":9.9}',
        "426ad470522b5acffd11d807332a3c6a2565e9c383a3016c9ea416eea99389df",
    ),
    "int-keys-by-code-point": (
        {10: "a", 9: "b"},
        '{"10":"a","9":"b"}',
        "12db95af954b281347ea3f145c21ec193e84090c4656c8e815e414e28fbb825f",
    ),
}


@pytest.mark.parametrize(
    ("value", "expected_json", "expected_sha256"), VECTORS.values(), ids=VECTORS
)
def test_canonical_json_vector(value: Any, expected_json: str, expected_sha256: str) -> None:
    """Each vector's canonical JSON is exactly the committed text."""
    assert expected_json == canonical_json(value)


@pytest.mark.parametrize(
    ("value", "expected_json", "expected_sha256"), VECTORS.values(), ids=VECTORS
)
def test_key_vector(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
    value: Any,
    expected_json: str,
    expected_sha256: str,
) -> None:
    """Each vector's stored key is ``prefix#sha256(canonical JSON)``, through the decorator."""

    @idempotent_function(
        data_keyword_argument="payload",
        persistence_store=idempotency_store,
        config=IdempotencyConfig(record_format="native", decision_hook=decisions),
        key_prefix="vectors",
    )
    def process(payload: Any) -> str:
        return "ok"

    process(payload=value)

    assert hashlib.sha256(expected_json.encode()).hexdigest() == expected_sha256
    assert f"vectors#{expected_sha256}" == decisions.last.key


def test_empty_containers_have_a_canonical_form() -> None:
    """``{}`` and ``[]`` encode (they are missing *keys*, but valid validation material)."""
    assert ("{}", "[]") == (canonical_json({}), canonical_json([]))


def test_canonical_bytes_are_utf8() -> None:
    """The hashed bytes are the UTF-8 encoding of the canonical text (non-ASCII unescaped)."""
    assert '{"name":"Zoë"}'.encode() == canonical_bytes({"name": "Zoë"})


@pytest.mark.parametrize(
    ("hash_function", "expected"),
    [
        ("sha256", "86c4ba29c6225d18159c2a99c770a3689aef9682cca4cfa30e867165624cfb26"),
        ("md5", "f1f77f026367529a1e18cc647a88a5ed"),
    ],
)
def test_handler_key_with_jmespath_and_hash_function(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
    hash_function: str,
    expected: str,
) -> None:
    """A handler keyed on ``body`` hashes ``{"order_id":1}`` with the configured algorithm."""
    config = IdempotencyConfig(
        record_format="native",
        event_key_jmespath="powertools_json(body)",
        hash_function=hash_function,
        decision_hook=decisions,
    )

    @idempotent(persistence_store=idempotency_store, config=config, key_prefix="vectors")
    def handler(event: dict[str, Any], context: Any) -> str:
        return "ok"

    handler({"body": '{ "order_id" : 1.0 }', "requestContext": {"requestId": "x"}}, lambda_context)

    assert f"vectors#{expected}" == decisions.last.key


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        float("inf"),
        float("-inf"),
        decimal.Decimal("NaN"),
        decimal.Decimal("sNaN"),
        decimal.Decimal("Infinity"),
        {"a": [1, float("nan")]},
        {float("nan"): 1},
        object(),
        {"a": object()},
        {(1, 2): "tuple keys have no JSON form"},
        {1: "a", "1": "b"},
    ],
    ids=repr,
)
def test_values_without_a_canonical_form_are_key_errors(value: Any) -> None:
    """NaN, Infinity, unknown types and keys that collide as strings raise `IdempotencyKeyError`."""
    with pytest.raises(IdempotencyKeyError):
        canonical_json(value)


@pytest.mark.parametrize("name", ["no-such-hash", "shake_256", ""])
def test_unknown_hash_function_is_a_config_error(name: str) -> None:
    """A name hashlib does not know (or with no fixed digest) fails when the config is built."""
    with pytest.raises(IdempotencyConfigError):
        IdempotencyConfig(hash_function=name)


class Price(float, enum.Enum):
    """A float-valued Enum."""

    LOW = 1.5


class Float64(float):
    """A float subclass whose repr is not a number, as numpy's ``float64`` is."""

    def __repr__(self) -> str:
        return f"np.float64({float(self)})"


@pytest.mark.parametrize(
    ("value", "same_as"),
    [
        (Price.LOW, 1.5),
        (Float64(1.5), 1.5),
        (Float64(2.0), 2),
        ({"price": Price.LOW, "n": [Float64(1e20)]}, {"price": 1.5, "n": [1e20]}),
        ({Float64(1.5): "a", Level.HIGH: "b"}, {1.5: "a", 2: "b"}),
    ],
    ids=["float-enum", "float-subclass", "integral-subclass", "nested", "as-object-keys"],
)
def test_float_enums_and_float_subclasses_hash_by_value(value: Any, same_as: Any) -> None:
    """Regression: a float Enum or a float subclass with a custom repr (numpy's float64) raised a
    raw decimal.InvalidOperation. Each is hashed as the plain number it stands for."""
    assert canonical_json(same_as) == canonical_json(value)


def test_a_float_enum_key_reaches_the_store_as_its_value(
    idempotency_store: InMemoryPersistenceLayer, decisions: Decisions
) -> None:
    """Through the decorator, a float Enum payload gets the key of its value."""
    config = IdempotencyConfig(record_format="native", decision_hook=decisions)

    @idempotent_function(
        data_keyword_argument="payload",
        persistence_store=idempotency_store,
        config=config,
        key_prefix="vectors",
    )
    def process(payload: Any) -> str:
        return "ok"

    assert "ok" == process(payload=Price.LOW)
    expected = hashlib.sha256(b"1.5").hexdigest()
    assert f"vectors#{expected}" == decisions.last.key
