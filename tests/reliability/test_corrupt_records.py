"""Corrupt items in the table: a typed error or treated as absent, never a raw KeyError.

Items are written straight into the table (as a buggy tool, a hand edit or another program
might leave them), then a decorated handler meets them. The outcome for each kind of damage is
the documented one (docs/reliability.md, "Corrupt records"); in every case the body either runs
once or not at all, and the caller gets a result or an `IdempotencyError`. The items are in the
native format's layout (``record_format="native"``).
"""

from __future__ import annotations

import base64
import zlib
from typing import Any

import pytest

from idempotent_lambda import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    IdempotencyError,
    IdempotencyPersistenceLayerError,
    Status,
    idempotent,
)
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests.reliability._support import SECRET, Executions, outcome_of, stored_key

CONFIG = IdempotencyConfig(record_format="native", event_key_jmespath="order")
EVENT = {"order": 1, "card": SECRET}
PREFIX = "corrupt"
NOW_MS = ManualClock().now_ms()
FUTURE_S = {"N": str(NOW_MS // 1000 + 3600)}
PAST_S = {"N": str(NOW_MS // 1000 - 10)}
FUTURE_MS = {"N": str(NOW_MS + 30_000)}


def completed(data: dict[str, Any] | None) -> dict[str, Any]:
    item = {"status": {"S": "COMPLETED"}, "expiration": FUTURE_S, "owner": {"S": "o"}}
    if data is not None:
        item["data"] = data
    return item


#: kind of damage -> (extra attributes of the item, what the caller gets, record afterwards)
CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    "unknown status": (
        {"status": {"S": "DONE"}, "expiration": FUTURE_S},
        "IdempotencyPersistenceLayerError",
        "unchanged",
    ),
    "lower-case status": (
        {"status": {"S": "completed"}, "expiration": FUTURE_S},
        "IdempotencyPersistenceLayerError",
        "unchanged",
    ),
    "no status": ({"expiration": FUTURE_S}, "IdempotencyPersistenceLayerError", "unchanged"),
    "status of the wrong type": (
        {"status": {"N": "1"}, "expiration": FUTURE_S},
        "IdempotencyPersistenceLayerError",
        "unchanged",
    ),
    "expiration of the wrong type": (
        {"status": {"S": "COMPLETED"}, "expiration": {"S": "soon"}, "data": {"S": "1"}},
        "IdempotencyPersistenceLayerError",
        "unchanged",
    ),
    "owner of the wrong type": (
        {**completed({"S": "1"}), "owner": {"N": "7"}},
        "IdempotencyPersistenceLayerError",
        "unchanged",
    ),
    "expired, unknown status": (
        {"status": {"S": "DONE"}, "expiration": PAST_S},
        "result",
        "COMPLETED",
    ),
    "expired, no status": ({"expiration": PAST_S}, "result", "COMPLETED"),
    "COMPLETED without data": (completed(None), "IdempotencyPersistenceLayerError", "unchanged"),
    "data: not JSON": (
        completed({"S": "{not json"}),
        "IdempotencyPersistenceLayerError",
        "unchanged",
    ),
    "data: bad $decimal": (
        completed({"S": '{"$decimal":"one"}'}),
        "IdempotencyPersistenceLayerError",
        "unchanged",
    ),
    "data: bad $bytes": (
        completed({"S": '{"$bytes":"!!!"}'}),
        "IdempotencyPersistenceLayerError",
        "unchanged",
    ),
    "data: bad $map": (
        completed({"S": '{"$map":[[{"a":1},2]]}'}),
        "IdempotencyPersistenceLayerError",
        "unchanged",
    ),
    "data: bad $float": (
        completed({"S": '{"$float":"many"}'}),
        "IdempotencyPersistenceLayerError",
        "unchanged",
    ),
    "data: truncated $unstorable marker": (
        completed({"S": '{"$unstorable":'}),
        "IdempotencyPersistenceLayerError",
        "unchanged",
    ),
    "data: binary, not zlib": (
        completed({"B": b"\x00garbage"}),
        "IdempotencyPersistenceLayerError",
        "unchanged",
    ),
    "data: zlib, not UTF-8": (
        completed({"B": zlib.compress(b"\xff\xfe\xfa")}),
        "IdempotencyPersistenceLayerError",
        "unchanged",
    ),
    "data: nested beyond the parser": (
        completed({"S": "[" * 100_000 + "]" * 100_000}),
        "IdempotencyPersistenceLayerError",
        "unchanged",
    ),
    "data of the wrong type": (
        completed({"N": "1"}),
        "IdempotencyPersistenceLayerError",
        "unchanged",
    ),
    "COMPLETED without expiration": (
        {"status": {"S": "COMPLETED"}, "data": {"S": '"stored"'}},
        "result",
        "unchanged",
    ),
    "IN_PROGRESS without lease": (
        {"status": {"S": "IN_PROGRESS"}, "expiration": FUTURE_S, "owner": {"S": "o"}},
        "IdempotencyAlreadyInProgressError",
        "unchanged",
    ),
    "IN_PROGRESS without lease or expiration": (
        {"status": {"S": "IN_PROGRESS"}, "owner": {"S": "o"}},
        "IdempotencyAlreadyInProgressError",
        "unchanged",
    ),
    "IN_PROGRESS without owner": (
        {
            "status": {"S": "IN_PROGRESS"},
            "expiration": FUTURE_S,
            "in_progress_expiration": FUTURE_MS,
        },
        "IdempotencyAlreadyInProgressError",
        "unchanged",
    ),
    "lease of the wrong type": (
        {
            "status": {"S": "IN_PROGRESS"},
            "expiration": FUTURE_S,
            "in_progress_expiration": {"S": "later"},
        },
        "IdempotencyPersistenceLayerError",
        "unchanged",
    ),
}


@pytest.fixture
def setup(
    dynamodb_client: Any, idempotency_table: str
) -> tuple[Any, DynamoDBPersistenceLayer, Executions, str]:
    clock = ManualClock(NOW_MS)
    store = DynamoDBPersistenceLayer(idempotency_table, boto3_client=dynamodb_client, clock=clock)
    executions = Executions()

    @idempotent(persistence_store=store, config=CONFIG, key_prefix=PREFIX)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        executions("run")
        return {"order": event["order"], "card": SECRET}

    return handler, store, executions, stored_key(CONFIG, EVENT, PREFIX)


@pytest.mark.parametrize("case", list(CASES))
def test_corrupt_item_gives_a_typed_error_or_is_treated_as_absent(
    case: str,
    setup: tuple[Any, DynamoDBPersistenceLayer, Executions, str],
    dynamodb_client: Any,
    idempotency_table: str,
) -> None:
    """The caller gets the documented outcome; the body runs at most once; nothing raw leaks."""
    handler, store, executions, key = setup
    attributes, expected, record_after = CASES[case]
    item = {"id": {"S": key}, **attributes}
    dynamodb_client.put_item(TableName=idempotency_table, Item=item)

    kind, value = outcome_of(lambda: handler(EVENT, FakeLambdaContext(10_000, clock=store.clock)))
    if isinstance(value, IdempotencyPersistenceLayerError):
        kind = "IdempotencyPersistenceLayerError"  # IdempotencyCorruptRecordError is one

    assert expected == kind
    assert kind == "result" or isinstance(value, IdempotencyError)
    assert SECRET not in str(value) or kind == "result"
    assert (1 if kind == "result" and record_after == "COMPLETED" else 0) == executions.total
    stored = dynamodb_client.get_item(TableName=idempotency_table, Key={"id": {"S": key}})["Item"]
    if record_after == "unchanged":
        assert item == _plain(stored)
    else:
        assert Status.COMPLETED.value == stored["status"]["S"]


def _plain(item: dict[str, Any]) -> dict[str, Any]:
    """Turn boto3's Binary-free low-level item back into what was written (bytes stay bytes)."""
    return {
        name: {kind: bytes(v) if kind == "B" else v for kind, v in value.items()}
        for name, value in item.items()
    }


def test_corrupt_item_met_while_waiting_is_a_typed_error(
    setup: tuple[Any, DynamoDBPersistenceLayer, Executions, str],
    dynamodb_client: Any,
    idempotency_table: str,
) -> None:
    """Wait mode's poll (get) meets an item gone corrupt: `IdempotencyPersistenceLayerError`."""
    _, store, executions, key = setup
    waiting = IdempotencyConfig(
        record_format="native", event_key_jmespath="order", wait_for_in_progress_seconds=1
    )

    @idempotent(persistence_store=store, config=waiting, key_prefix=PREFIX)
    def handler(event: dict[str, Any], context: Any) -> None:
        executions("run")

    live = {
        "id": {"S": key},
        "status": {"S": "IN_PROGRESS"},
        "expiration": FUTURE_S,
        "in_progress_expiration": FUTURE_MS,
        "owner": {"S": "holder"},
    }
    dynamodb_client.put_item(TableName=idempotency_table, Item=live)
    corrupt = {**live, "status": {"S": "BROKEN"}}

    def corrupt_it(**_: Any) -> None:
        dynamodb_client.put_item(TableName=idempotency_table, Item=corrupt)

    store._get_client().meta.events.register("before-send.dynamodb.GetItem", corrupt_it)
    _, error = outcome_of(lambda: handler(EVENT, FakeLambdaContext(10_000, clock=store.clock)))
    assert isinstance(error, IdempotencyPersistenceLayerError)
    assert 0 == executions.total


def test_base64_looking_text_data_is_not_decoded(
    setup: tuple[Any, DynamoDBPersistenceLayer, Executions, str],
    dynamodb_client: Any,
    idempotency_table: str,
) -> None:
    """S data is JSON text, whatever it looks like: a base64 string replays as that string."""
    handler, _, executions, key = setup
    text = '"' + base64.b64encode(b"hello").decode() + '"'
    item = {"id": {"S": key}, **completed({"S": text})}
    dynamodb_client.put_item(TableName=idempotency_table, Item=item)
    assert "aGVsbG8=" == handler(EVENT, None)
    assert 0 == executions.total
