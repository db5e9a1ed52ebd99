"""An outbox event's way from `emit` to its ``PutEvents`` entry: the detail is serialised once
and parsed once, and the entry's detail is the body's with the id (and trace context) added."""

from __future__ import annotations

import json
from typing import Any

import pytest

from idempotent_lambda import IdempotencyConfig, InMemoryPersistenceLayer, idempotent
from idempotent_lambda._outbox_format import DETAIL_KEY, OutboxEvent
from idempotent_lambda.outbox import emit
from idempotent_lambda.persistence.dynamodb import _outbox as dynamodb_outbox

TRACE = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"


class CountingJson:
    """Stands in for ``json`` in a module: counts the calls that carry the detail."""

    def __init__(self, detail: dict[str, Any]) -> None:
        self.detail = detail
        self.text = json.dumps(detail, separators=(",", ":"), ensure_ascii=False)
        self.dumps_of_detail = 0
        self.loads_of_detail = 0

    def dumps(self, value: Any, **options: Any) -> str:
        if isinstance(value, dict) and set(self.detail) <= set(value):
            self.dumps_of_detail += 1
        return json.dumps(value, **options)

    def loads(self, text: Any, **options: Any) -> Any:
        if isinstance(text, str) and text.strip().startswith(self.text[:-1]):
            self.loads_of_detail += 1
        return json.loads(text, **options)


def emitted(detail: dict[str, Any]) -> tuple[OutboxEvent, InMemoryPersistenceLayer]:
    """Run one body that emits ``detail``; return the event and the store."""
    store = InMemoryPersistenceLayer()

    @idempotent(persistence_store=store, config=IdempotencyConfig(event_key_jmespath="id"))
    def handler(event: Any, context: Any) -> str:
        return emit("Happened", detail, source="tests.outbox")

    handler({"id": "1"}, None)
    (event,) = store.outbox_events
    return event, store


def test_the_detail_is_serialised_once_and_parsed_once_from_emit_to_the_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """emit serialises it, the store's reader parses it, and the entry adds the id to the text."""
    detail = {"order_id": "o-1", "lines": [{"sku": "A", "n": 2}], "note": "café"}
    counter = CountingJson(detail)
    monkeypatch.setattr("idempotent_lambda._outbox_format.json", counter)
    monkeypatch.setattr(dynamodb_outbox, "json", counter)
    event, _ = emitted(detail)
    item = {"id": {"S": "k"}, **dynamodb_outbox.event_item(event)}
    with monkeypatch.context() as patch:  # the item's id is its key's: read it under that key
        patch.setattr(dynamodb_outbox, "event_id", lambda key: event.event_id)
        read = dynamodb_outbox.read_event(item, {"id": {"S": "k"}})
    entry = read.entry("bus", TRACE)
    assert (1, 1) == (counter.dumps_of_detail, counter.loads_of_detail)
    expected = {**detail, DETAIL_KEY: {"id": event.event_id, "traceparent": TRACE}}
    assert expected == json.loads(entry["Detail"])


@pytest.mark.parametrize(
    "text",
    ["{}", "{ }", '{"a":1}', ' {"a": [1, {"b": "}"}]} \n', '{"s":"{"}'],
)
def test_the_id_is_added_to_any_stored_object_text(text: str) -> None:
    """Empty or not, spaced or compact, braces inside strings: the entry is the object plus id."""
    event = OutboxEvent("e-1", "T", text, "s", None, 0)
    assert {**json.loads(text), DETAIL_KEY: {"id": "e-1"}} == json.loads(
        event.entry(None)["Detail"]
    )


def test_a_stored_outbox_field_is_replaced_by_the_id() -> None:
    """An item whose detail carries its own ``outbox`` field (emit never writes one) goes out
    with the id there, and nothing of the stored field."""
    event = OutboxEvent("e-1", "T", "{}", "s", None, 0)
    item = {
        "id": {"S": "k"},
        **dynamodb_outbox.event_item(event),
        "outbox_detail": {"S": '{"a":1,"outbox":{"id":"forged"}}'},
    }
    key = {"id": {"S": "k"}}
    item["outbox_id"] = {"S": dynamodb_outbox.event_id(key)}
    read = dynamodb_outbox.read_event(item, key)
    assert {"a": 1, DETAIL_KEY: {"id": read.event_id}} == json.loads(read.entry(None)["Detail"])
