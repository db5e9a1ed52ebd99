"""A Powertools application passes its tests after the literal import swap, on the table it filled.

`tests/migration/_orders_app.py` is an order service written with Powertools. It is loaded twice
under its one module name: its text as it is (real Powertools 3.37), and its text with
``aws_lambda_powertools.utilities.idempotency`` replaced by ``idempotent_lambda`` (the migrated
service, default config). Both run on one table of moto's DynamoDB server, as the old and the new
fleet of a deploy do, and both ways, deploy then rollback. Every side effect lands in one ledger:
a double execution would show up twice in it.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from idempotent_lambda import idempotent
from tests.migration._ledger import LEDGER

APP = Path(__file__).with_name("_orders_app.py")
POWERTOOLS_PREFIX = "aws_lambda_powertools.utilities.idempotency"
ORDERS = [{"order_id": f"o-{n}", "amount": 10 * n} for n in range(1, 6)]


def load(text: str, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """Run ``text`` as a fresh module named ``orders_app``, as a deployed function imports it."""
    module = types.ModuleType("orders_app")
    module.__file__ = str(APP)
    monkeypatch.setitem(sys.modules, "orders_app", module)  # for its dataclass, while it runs
    exec(compile(text, str(APP), "exec"), module.__dict__)
    return module


def check_orders(app: Any, context: Any, orders: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The application's own tests: a retry answers the same, a changed amount is refused."""
    answers = [app.lambda_handler(order, context) for order in orders]
    assert answers == [app.lambda_handler(dict(order), context) for order in orders]
    for order in orders:
        with pytest.raises(app.IdempotencyValidationError):
            app.lambda_handler({**order, "amount": order["amount"] + 1}, context)
    return answers


@pytest.fixture
def apps(
    make_table: Any, dynamodb_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[types.ModuleType, types.ModuleType]:
    """Return the Powertools app and the swapped one, both on one fresh table."""
    monkeypatch.setenv("IDEMPOTENCY_TABLE", make_table())
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_endpoint)
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "orders")
    LEDGER.clear()
    text = APP.read_text()
    swapped = text.replace(POWERTOOLS_PREFIX, "idempotent_lambda")
    assert POWERTOOLS_PREFIX not in swapped
    assert text.count(POWERTOOLS_PREFIX) == 3  # the three import lines, nothing else
    return load(text, monkeypatch), load(swapped, monkeypatch)


def test_the_swapped_app_replays_what_powertools_did_and_powertools_replays_it_back(
    apps: tuple[types.ModuleType, types.ModuleType], lambda_context: Any
) -> None:
    """Deploy: the swapped app replays Powertools' orders. Rollback: Powertools replays ours."""
    powertools_app, swapped_app = apps
    assert idempotent is swapped_app.idempotent is not powertools_app.idempotent

    filled = check_orders(powertools_app, lambda_context, ORDERS[:3])
    ran_before_the_deploy = list(LEDGER)
    after_the_deploy = check_orders(swapped_app, lambda_context, ORDERS[:3])
    assert (filled, ran_before_the_deploy) == (after_the_deploy, LEDGER)

    new_orders = check_orders(swapped_app, lambda_context, ORDERS[3:])
    after_the_rollback = check_orders(powertools_app, lambda_context, ORDERS[3:])

    assert new_orders == after_the_rollback
    assert sorted(set(LEDGER)) == sorted(LEDGER)  # zero double executions
    assert 2 * len(ORDERS) == len(LEDGER)  # each order and its payment, once


def test_a_payment_powertools_charged_is_not_charged_again_by_the_swapped_app(
    apps: tuple[types.ModuleType, types.ModuleType], lambda_context: Any
) -> None:
    """The nested ``idempotent_function`` replays too: a retry of the order reuses the payment."""
    powertools_app, swapped_app = apps
    paid = powertools_app.charge(payment={"payment_id": "pay-o-9", "amount": 90})

    order = swapped_app.lambda_handler({"order_id": "o-9", "amount": 90}, lambda_context)

    assert paid.confirmation == order["confirmation"]
    assert [("charge", "pay-o-9"), ("order", "o-9")] == LEDGER
