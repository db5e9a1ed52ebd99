"""What the outbox trust tests share: a stack with the index of unpublished items, emitters,
direct writes of outbox items, the events delivered to the rule's queue."""

from __future__ import annotations

import io
import json
from typing import Any

from idempotent_lambda import IdempotencyConfig, idempotent
from idempotent_lambda._outbox_format import event_id
from idempotent_lambda.metrics import EMFMetrics
from idempotent_lambda.outbox import OUTBOX_INDEX, emit
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.testing import ManualClock
from tests.integration._outbox_stack import SOURCE, OutboxStack, client


def with_index(stack: OutboxStack) -> OutboxStack:
    """Give the stack's table the sparse index of unpublished items (as the sample stack does)."""
    ddb = client("dynamodb", stack.endpoint)
    keys = ddb.describe_table(TableName=stack.table)["Table"]["AttributeDefinitions"]
    ddb.update_table(  # the key attributes again: moto replaces the definitions it is given
        TableName=stack.table,
        AttributeDefinitions=[
            *keys,
            {"AttributeName": "outbox_pending", "AttributeType": "S"},
            {"AttributeName": "outbox_emitted_at", "AttributeType": "N"},
        ],
        GlobalSecondaryIndexUpdates=[
            {
                "Create": {
                    "IndexName": OUTBOX_INDEX,
                    "KeySchema": [
                        {"AttributeName": "outbox_pending", "KeyType": "HASH"},
                        {"AttributeName": "outbox_emitted_at", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                }
            }
        ],
    )
    return stack


def store_on(stack: OutboxStack, clock: ManualClock | None = None, **kwargs: Any) -> Any:
    """A store of the stack's table (its own clock when given)."""
    extra: dict[str, Any] = {} if clock is None else {"clock": clock}
    return DynamoDBPersistenceLayer(
        stack.table, boto3_client=client("dynamodb", stack.endpoint), **extra, **kwargs
    )


def emitter(store: Any, stack: OutboxStack, *, prefix: str = "orders", expires: int = 3600) -> Any:
    config = IdempotencyConfig(event_key_jmespath="order_id", expires_after_seconds=expires)

    @idempotent(persistence_store=store, config=config, key_prefix=prefix)
    def handler(event: dict[str, Any], context: Any) -> str:
        return emit(
            "OrderCreated", {"order_id": event["order_id"]}, source=SOURCE, event_bus_name=stack.bus
        )

    return handler


def quiet_metrics() -> EMFMetrics:
    return EMFMetrics("tests", stream=io.StringIO())


def delivered(stack: OutboxStack) -> list[tuple[str, dict[str, Any]]]:
    """The events on the consumer's queue: (outbox id, detail without it)."""
    found = []
    for message in stack.received():
        detail = json.loads(message["Body"])["detail"]
        found.append((detail.pop("outbox")["id"], detail))
    return sorted(found, key=lambda pair: pair[1].get("order_id", ""))


def put_item(stack: OutboxStack, key: str, *, outbox_id: str | None = None, **attrs: Any) -> str:
    """Write an outbox item at ``key`` directly (a writer of the table); return its true id."""
    true_id = event_id({"id": {"S": key}})
    item = {
        "id": {"S": key},
        "outbox_id": {"S": outbox_id or true_id},
        "outbox_detail_type": {"S": "OrderCreated"},
        "outbox_detail": {"S": attrs.pop("detail", '{"order_id": "forged"}')},
        "outbox_source": {"S": SOURCE},
        "outbox_event_bus": {"S": stack.bus},
        "outbox_emitted_at": {"N": str(attrs.pop("emitted_at", 1_700_000_000_000))},
        **attrs,
    }
    client("dynamodb", stack.endpoint).put_item(TableName=stack.table, Item=item)
    return true_id
