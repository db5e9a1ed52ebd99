"""event_keys.OUTBOX_EVENT: the outbox id with the event's account and source, or no key."""

from __future__ import annotations

import json
from typing import Any

import pytest

from idempotent_lambda import IdempotencyConfig, InMemoryPersistenceLayer, event_keys, idempotent

#: An outbox event as EventBridge delivers it to a rule's target.
EVENT = {
    "version": "0",
    "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
    "detail-type": "OrderCreated",
    "source": "shop.orders",
    "account": "111122223333",
    "time": "2026-12-07T12:00:00Z",
    "region": "eu-west-1",
    "resources": [],
    "detail": {"order_id": "o-1", "outbox": {"id": "0f8e5b9a-2c1d-5e4f-8a7b-6c5d4e3f2a1b"}},
}


def in_sqs(event: dict[str, Any]) -> dict[str, Any]:
    """Return ``event`` as the body of an SQS record (a rule targeting a queue)."""
    return {"eventSource": "aws:sqs", "messageId": "m-1", "body": json.dumps(event)}


def material(payload: dict[str, Any]) -> Any:
    return IdempotencyConfig(event_key_jmespath=event_keys.OUTBOX_EVENT).key_material(payload)


@pytest.mark.parametrize("wrap", [lambda e: e, in_sqs])
def test_the_key_is_the_id_the_account_and_the_source(wrap: Any) -> None:
    """Found in the event itself and in an SQS message's body."""
    expected = ["0f8e5b9a-2c1d-5e4f-8a7b-6c5d4e3f2a1b", "111122223333", "shop.orders"]
    assert expected == material(wrap(EVENT))


@pytest.mark.parametrize("field", ["account", "source"])
def test_a_forged_event_with_the_real_id_never_shares_its_key(field: str) -> None:
    """Another account, or another source, with the same outbox id: the real event still runs."""
    store = InMemoryPersistenceLayer()
    runs: list[str] = []

    @idempotent(
        persistence_store=store,
        config=IdempotencyConfig(event_key_jmespath=event_keys.OUTBOX_EVENT),
    )
    def consume(event: dict[str, Any], context: Any) -> str:
        runs.append(event[field])
        return "done"

    consume({**EVENT, field: "forger"}, None)
    consume(EVENT, None)
    consume(EVENT, None)  # the real one again: a duplicate
    assert ["forger", EVENT[field]] == runs


@pytest.mark.parametrize(
    "payload",
    [
        {**EVENT, "detail": {"order_id": "o-1"}},
        {**EVENT, "detail": {"outbox": {}}},
        in_sqs({**EVENT, "detail": {}}),
        {"detail": {}},
    ],
)
def test_an_event_without_an_outbox_id_has_no_key(payload: dict[str, Any]) -> None:
    """No id: no key at all (never a list of nulls, which JMESPath counts as a value)."""
    assert material(payload) is None


def test_the_preset_is_the_documented_expression_built_from_the_format_constants() -> None:
    """The preset is a JMESPath string by contract: built from `_outbox_format`'s names, it
    still reads as DESIGN's expression, so a renamed constant cannot move the key unnoticed."""
    by_hand = (
        "detail.outbox.id && [detail.outbox.id, account, source] || "
        "((body && powertools_json(body)) | "
        "detail.outbox.id && [detail.outbox.id, account, source])"
    )
    assert by_hand == event_keys.OUTBOX_EVENT
