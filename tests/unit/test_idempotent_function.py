"""`idempotent_function`: finding the payload, payload types, per-decorator config, the context."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import threading
from typing import Any

import pydantic
import pytest

from idempotent_lambda import (
    IdempotencyConfig,
    IdempotencyConfigError,
    IdempotencyKeyError,
    InMemoryPersistenceLayer,
    idempotent,
    idempotent_function,
)
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests.unit._doubles import Decisions, Runs, SpyStore, lease_end_ms


@dataclasses.dataclass
class Item:
    """A nested dataclass payload part."""

    sku: str
    quantity: int


@dataclasses.dataclass
class Order:
    """A dataclass payload."""

    order_id: int
    item: Item
    placed: datetime.date


class OrderModel(pydantic.BaseModel):
    """The same payload as a pydantic model."""

    order_id: int
    item: dict[str, Any]
    placed: datetime.date


ORDER_DICT = {"order_id": 1, "item": {"sku": "A-1", "quantity": 2}, "placed": "2026-01-02"}


def test_payload_found_by_keyword_or_by_position(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """The payload is keyed the same whether passed by keyword or by position."""
    runs = Runs()

    @idempotent_function(data_keyword_argument="order", persistence_store=idempotency_store)
    def process(customer: str, order: dict[str, Any], note: str = "") -> int:
        return runs(order)

    process("ann", {"id": 1})
    process("bob", order={"id": 1})
    process(customer="cid", order={"id": 1}, note="x")

    assert 1 == runs.count


def test_other_arguments_do_not_affect_the_key(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """Only the named argument is key material."""
    runs = Runs()

    @idempotent_function(data_keyword_argument="order", persistence_store=idempotency_store)
    def process(order: dict[str, Any], attempt: int) -> int:
        return runs(order)

    process({"id": 1}, 1)
    process({"id": 1}, 2)
    process({"id": 2}, 1)

    assert 2 == runs.count


def test_keyword_only_payload(idempotency_store: InMemoryPersistenceLayer) -> None:
    """A keyword-only parameter can be the payload."""
    runs = Runs()

    @idempotent_function(data_keyword_argument="order", persistence_store=idempotency_store)
    def process(*, order: dict[str, Any]) -> int:
        return runs(order)

    process(order={"id": 1})
    process(order={"id": 1})

    assert 1 == runs.count


def test_unknown_payload_name_fails_at_decoration(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """A ``data_keyword_argument`` that is not a parameter is a config error when decorating."""
    decorate = idempotent_function(
        data_keyword_argument="ordr", persistence_store=idempotency_store
    )

    def process(order: dict[str, Any]) -> None:
        return None

    with pytest.raises(IdempotencyConfigError):
        decorate(process)


def _keys(store: InMemoryPersistenceLayer, decisions: Decisions, payload: Any) -> str:
    @idempotent_function(
        data_keyword_argument="order",
        persistence_store=store,
        config=IdempotencyConfig(decision_hook=decisions),
        key_prefix="orders",
    )
    def process(order: Any) -> str:
        return "ok"

    process(order=payload)
    return decisions.last.key or ""


@pytest.mark.parametrize(
    "payload",
    [
        Order(1, Item("A-1", 2), datetime.date(2026, 1, 2)),
        OrderModel(
            order_id=1, item={"sku": "A-1", "quantity": 2}, placed=datetime.date(2026, 1, 2)
        ),
    ],
    ids=["dataclass", "pydantic"],
)
def test_dataclass_and_pydantic_payloads_hash_as_their_json_form(
    idempotency_store: InMemoryPersistenceLayer, decisions: Decisions, payload: Any
) -> None:
    """A dataclass or model payload gets the same key as the equivalent JSON dict."""
    expected = _keys(InMemoryPersistenceLayer(), Decisions(), ORDER_DICT)

    assert expected == _keys(idempotency_store, decisions, payload)


def test_event_key_jmespath_applies_to_a_dataclass_payload(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """The key expression sees the dataclass as its JSON form."""
    runs = Runs()

    @idempotent_function(
        data_keyword_argument="order",
        persistence_store=idempotency_store,
        config=IdempotencyConfig(event_key_jmespath="order_id"),
    )
    def process(order: Order) -> int:
        return runs(order)

    process(order=Order(1, Item("A-1", 2), datetime.date(2026, 1, 2)))
    process(order=Order(1, Item("B-2", 9), datetime.date(2026, 1, 3)))

    assert 1 == runs.count


@dataclasses.dataclass
class Job:
    """A dataclass payload with a field no JSON (nor ``copy.deepcopy``) can represent."""

    id: int
    guard: Any


class JobModel(pydantic.BaseModel):
    """The same as a pydantic model."""

    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)

    id: int
    guard: Any


@pytest.mark.parametrize("job_type", [Job, JobModel])
def test_a_field_without_json_form_matters_only_if_the_key_reads_it(
    idempotency_store: InMemoryPersistenceLayer, job_type: Any
) -> None:
    """A lock in a field the key expression does not read is fine: the key comes from ``id``.

    Native only: the default copies the whole payload first, as Powertools does (a key error).
    """
    runs = Runs()
    config = IdempotencyConfig(record_format="native", event_key_jmespath="id")

    @idempotent_function(
        data_keyword_argument="job", persistence_store=idempotency_store, config=config
    )
    def process(job: Any) -> int:
        return runs(job.id)

    assert [1, 1] == [process(job=job_type(id=7, guard=threading.Lock())) for _ in range(2)]
    assert 1 == runs.count


@pytest.mark.parametrize("job_type", [Job, JobModel])
@pytest.mark.parametrize("expression", ["", "guard", "[id, guard]"])
def test_a_key_that_reaches_a_field_without_json_form_is_a_key_error(
    idempotency_store: InMemoryPersistenceLayer, job_type: Any, expression: str
) -> None:
    """Reaching the lock is an `IdempotencyKeyError` naming its type, never a raw TypeError."""
    runs = Runs()
    config = IdempotencyConfig(record_format="native", event_key_jmespath=expression)

    @idempotent_function(
        data_keyword_argument="job", persistence_store=idempotency_store, config=config
    )
    def process(job: Any) -> int:
        return runs(job.id)

    with pytest.raises(IdempotencyKeyError, match="lock"):
        process(job=job_type(id=7, guard=threading.Lock()))
    assert 0 == runs.count


class OldPydanticModel:
    """Acts out a pydantic < 2.11 model with a field it cannot render (no ``fallback``)."""

    id = 7

    def model_dump(self, *, mode: str, **options: Any) -> dict[str, Any]:
        """Fail as pydantic does: no JSON form, and ``fallback`` unknown."""
        if options:
            raise TypeError("model_dump() got an unexpected keyword argument 'fallback'")
        raise ValueError("Unable to serialize unknown type: <class '_thread.lock'>")


def test_an_older_pydantic_model_without_json_form_is_a_key_error(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """Without pydantic's ``fallback``, such a model is an `IdempotencyKeyError`, not a crash."""
    runs = Runs()

    @idempotent_function(data_keyword_argument="job", persistence_store=idempotency_store)
    def process(job: Any) -> int:
        return runs(job.id)

    with pytest.raises(IdempotencyKeyError, match="no JSON form"):
        process(job=OldPydanticModel())
    assert 0 == runs.count


def test_a_dataclass_payload_that_contains_itself_is_a_key_error(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """A payload with no JSON form at all (a cycle) is an `IdempotencyKeyError`, body not run."""
    runs = Runs()
    config = IdempotencyConfig(event_key_jmespath="id")

    @idempotent_function(
        data_keyword_argument="job", persistence_store=idempotency_store, config=config
    )
    def process(job: Any) -> int:
        return runs(job.id)

    job = Job(id=7, guard=None)
    job.guard = job
    with pytest.raises(IdempotencyKeyError, match="no JSON form"):
        process(job=job)
    assert 0 == runs.count


@pytest.mark.parametrize("payload", ["order-1", 42, 1.5, decimal.Decimal("2.50"), [1, 2]])
def test_scalar_and_list_payloads_are_keys(
    idempotency_store: InMemoryPersistenceLayer, payload: Any
) -> None:
    """A bare string, number or list is the key material."""
    runs = Runs()

    @idempotent_function(data_keyword_argument="value", persistence_store=idempotency_store)
    def process(value: Any) -> int:
        return runs(value)

    process(payload)
    process(value=payload)

    assert 1 == runs.count


def test_each_decorator_keeps_its_own_config(
    idempotency_clock: ManualClock, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """Two functions on one store keep their own settings and keys."""
    short_runs, long_runs = Runs(), Runs()

    @idempotent_function(
        data_keyword_argument="order",
        persistence_store=idempotency_store,
        config=IdempotencyConfig(event_key_jmespath="id", expires_after_seconds=10),
    )
    def short_lived(order: dict[str, Any]) -> int:
        return short_runs(order)

    @idempotent_function(
        data_keyword_argument="order",
        persistence_store=idempotency_store,
        config=IdempotencyConfig(event_key_jmespath="ref", expires_after_seconds=1000),
    )
    def long_lived(order: dict[str, Any]) -> int:
        return long_runs(order)

    order = {"id": 1, "ref": "r-1"}
    short_lived(order=order)
    long_lived(order=order)
    idempotency_clock.advance(11)
    short_lived(order={"id": 1, "ref": "other"})
    long_lived(order={"id": 2, "ref": "r-1"})

    assert 2 == short_runs.count
    assert 1 == long_runs.count
    assert 2 == len(idempotency_store)


def test_same_payload_in_two_functions_gives_two_keys(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """The default prefix names the function, so two functions never share a record."""
    runs = Runs()

    @idempotent_function(data_keyword_argument="order", persistence_store=idempotency_store)
    def charge(order: dict[str, Any]) -> str:
        runs(order)
        return "charged"

    @idempotent_function(data_keyword_argument="order", persistence_store=idempotency_store)
    def ship(order: dict[str, Any]) -> str:
        runs(order)
        return "shipped"

    assert ("charged", "shipped") == (charge(order={"id": 1}), ship(order={"id": 1}))
    assert ("charged", "shipped") == (charge(order={"id": 1}), ship(order={"id": 1}))
    assert 2 == runs.count


def test_default_prefix_reads_the_function_name_on_every_call(
    idempotency_store: InMemoryPersistenceLayer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``AWS_LAMBDA_FUNCTION_NAME`` is read per call: changing it changes the stored key."""

    @idempotent_function(
        data_keyword_argument="order",
        persistence_store=idempotency_store,
        config=IdempotencyConfig(record_format="native"),  # "local"; the default: "test-func"
    )
    def charge(order: dict[str, Any]) -> str:
        return "charged"

    qualified = f"{charge.__module__}.{charge.__qualname__}#"
    prefixes = []
    for name in (None, "orders-prod", "orders-prod", "", "commandes-é"):
        if name is None:
            monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
        else:
            monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", name)
        idempotency_store.clear()
        charge(order={"id": 1})
        ((key, _),) = idempotency_store._records.items()
        prefixes.append(key.split(qualified)[0])
    assert ["local.", "orders-prod.", "orders-prod.", "local.", "commandes-é."] == prefixes


def test_nested_function_sees_the_handler_context(
    idempotency_clock: ManualClock, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """Inside an ``@idempotent`` handler, a nested function's lease is the handler's deadline."""
    store = SpyStore(idempotency_store)
    config = IdempotencyConfig(in_progress_expiry_seconds=600)

    @idempotent_function(data_keyword_argument="item", persistence_store=store, config=config)
    def reserve(item: str) -> str:
        return f"reserved {item}"

    @idempotent(persistence_store=store, config=config)
    def handler(event: dict[str, Any], context: Any) -> list[str]:
        idempotency_clock.advance(2)
        return [reserve(item) for item in event["items"]]

    handler({"items": ["a"]}, FakeLambdaContext(20_000, clock=idempotency_clock))

    deadline = idempotency_clock.now_ms() + 18_000
    handler_claim, nested_claim = store.claims
    assert handler_claim.idempotency_key != nested_claim.idempotency_key
    assert 0 <= deadline - lease_end_ms(nested_claim) <= 1000


def test_nested_function_results_are_stored_under_their_own_keys(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A nested function's result never lands under the handler's key (Powertools' bug)."""

    @idempotent_function(data_keyword_argument="item", persistence_store=idempotency_store)
    def reserve(item: str) -> str:
        return f"reserved {item}"

    @idempotent(persistence_store=idempotency_store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"reservations": [reserve(item) for item in event["items"]]}

    first = handler({"items": ["a", "b"]}, lambda_context)
    replay = handler({"items": ["a", "b"]}, lambda_context)

    assert {"reservations": ["reserved a", "reserved b"]} == first
    assert first == replay
    assert "reserved a" == reserve("a")


def test_context_binding_ends_with_the_handler(
    idempotency_clock: ManualClock, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """After the handler returns, a function called outside it no longer sees its context."""
    store = SpyStore(idempotency_store)

    @idempotent_function(data_keyword_argument="item", persistence_store=store)
    def reserve(item: str) -> str:
        return item

    @idempotent(persistence_store=store)
    def handler(event: dict[str, Any], context: Any) -> str:
        return reserve("inside")

    handler({"id": 1}, FakeLambdaContext(5_000, clock=idempotency_clock))
    reserve("outside")

    outside = store.claims[-1]
    expected = idempotency_clock.now_ms() + 900_000
    assert expected == outside.in_progress_expiry_timestamp


def test_register_lambda_context_sets_the_lease(
    idempotency_clock: ManualClock, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """``config.register_lambda_context(ctx)`` makes a plain function's lease the remaining time."""
    store = SpyStore(idempotency_store)
    config = IdempotencyConfig()

    @idempotent_function(data_keyword_argument="order", persistence_store=store, config=config)
    def process(order: dict[str, Any]) -> str:
        return "done"

    def lambda_handler(event: dict[str, Any], context: Any) -> str:
        config.register_lambda_context(context)
        return process(order=event)

    lambda_handler({"id": 1}, FakeLambdaContext(7_000, clock=idempotency_clock))

    assert idempotency_clock.now_ms() + 7_000 == lease_end_ms(store.claims[0])


def test_config_lambda_context_is_a_fallback(
    idempotency_clock: ManualClock, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """A context given to the config is used when none is bound."""
    store = SpyStore(idempotency_store)
    config = IdempotencyConfig(lambda_context=FakeLambdaContext(4_000, clock=idempotency_clock))

    @idempotent_function(data_keyword_argument="order", persistence_store=store, config=config)
    def process(order: dict[str, Any]) -> str:
        return "done"

    process(order={"id": 1})

    lease = lease_end_ms(store.claims[0])
    assert 0 <= idempotency_clock.now_ms() + 4_000 - lease <= 1000


def test_decorated_function_keeps_its_name_and_doc(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """The wrapper looks like the function (``functools.wraps``)."""

    @idempotent_function(data_keyword_argument="order", persistence_store=idempotency_store)
    def process(order: dict[str, Any]) -> None:
        """Process an order."""

    assert ("process", "Process an order.") == (process.__name__, process.__doc__)
