"""`idempotent_function` on a table shared with Powertools: payloads as Powertools passes them.

The same function is decorated by Powertools' ``idempotent_function`` and by ours, each with its
own dataclass serializer (what the literal import swap gives), on one DynamoDB table or one
redis-server. A payload is a dict, a dataclass or a pydantic model, passed by keyword.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pydantic
import pytest
from aws_lambda_powertools.utilities.idempotency.serialization.dataclass import (
    DataclassSerializer as PowertoolsDataclassSerializer,
)

from idempotent_lambda import IdempotencyConfig, IdempotencyValidationError, idempotent_function
from idempotent_lambda._clock import SYSTEM_CLOCK
from idempotent_lambda.serialization.dataclass import DataclassSerializer
from tests.integration._two_libraries import (
    BACKENDS,
    WAIT_S,
    Fleet,
    Race,
    fleet_on,
    pt,
)


@dataclasses.dataclass
class Order:
    """A dataclass payload."""

    id: str
    amount: int


class OrderModel(pydantic.BaseModel):
    """The same as a pydantic model."""

    id: str
    amount: int


@dataclasses.dataclass
class Receipt:
    """The result, rebuilt by each library's serializer."""

    order_id: str
    run: int


PAYLOADS = {
    "dict": {"id": "o-1", "amount": 5},
    "dataclass": Order("o-1", 5),
    "pydantic": OrderModel(id="o-1", amount=5),
}
OPTIONS = {"event_key_jmespath": "id", "payload_validation_jmespath": "amount"}


@pytest.fixture(params=BACKENDS)
def fleet(request: pytest.FixtureRequest) -> Fleet:
    """The shared backend: a fresh DynamoDB table, or an emptied redis-server database."""
    return fleet_on(request, request.param)


class Charge:
    """The function both libraries decorate; its first run may wait to be let go."""

    def __init__(self, fleet: Fleet, **options: Any) -> None:
        self.calls = 0
        self.go = threading.Event()
        self.go.set()
        counting = threading.Lock()

        def charge(order: Any) -> Receipt:
            with counting:
                self.calls += 1
                run = self.calls
            if run == 1:
                assert self.go.wait(WAIT_S)
            order_id = order["id"] if isinstance(order, dict) else order.id
            return Receipt(order_id, run)

        self.theirs = pt.idempotent_function(
            data_keyword_argument="order",
            persistence_store=fleet.powertools_store(),
            config=pt.IdempotencyConfig(**options),
            output_serializer=PowertoolsDataclassSerializer(model=Receipt),
        )(charge)
        self.ours = idempotent_function(
            data_keyword_argument="order",
            persistence_store=fleet.our_store(SYSTEM_CLOCK),
            config=IdempotencyConfig(**options),
            output_serializer=DataclassSerializer(model=Receipt),
        )(charge)


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS)
@pytest.mark.parametrize("first", ["powertools", "ours"])
def test_a_call_completed_by_one_is_replayed_by_the_other(
    fleet: Fleet, first: str, payload: Any
) -> None:
    """Same key and validation hash from either library; the replay is a `Receipt` again."""
    charge = Charge(fleet, **OPTIONS)
    libraries = (charge.theirs, charge.ours)
    run, replay = libraries if first == "powertools" else libraries[::-1]

    result = run(order=payload)
    if fleet.backend == "redis" and first == "powertools":
        return  # Powertools' Redis layer drops the validation hash (test_shared_tables)
    replayed = replay(order=payload)

    assert (Receipt("o-1", 1), Receipt("o-1", 1), 1) == (result, replayed, charge.calls)


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS)
def test_a_changed_validated_payload_is_refused_by_both(fleet: Fleet, payload: Any) -> None:
    """Completed by us with amount 5: amount 6 under the same key fails validation in both."""
    charge = Charge(fleet, **OPTIONS)
    charge.ours(order=payload)
    changed = {"id": "o-1", "amount": 6}

    with pytest.raises(pt.exceptions.IdempotencyValidationError):
        charge.theirs(order=changed)
    with pytest.raises(IdempotencyValidationError):
        charge.ours(order=changed)
    assert 1 == charge.calls


def test_racing_calls_one_per_library_run_the_function_once(fleet: Fleet) -> None:
    """Two threads, one per library, on one key: exactly one run, the other is refused."""
    for attempt in range(5):
        charge = Charge(fleet, event_key_jmespath="id")
        race = Race(order={"id": f"o-{attempt}", "amount": 1})
        charge.go = race.loser_done  # the winner runs until the loser was refused
        race.run(charge.theirs, charge.ours)

        assert (1, 1) == (charge.calls, len(race.refused))
