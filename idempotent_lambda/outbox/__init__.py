"""The transactional outbox: a state change and the events that announce it, both or neither.

Inside any idempotent body (`idempotent`, `idempotent_function`, every batch adapter's record
handler, `idempotent_lambda.durable.step`), `emit` queues an event. It is written as an item of
the idempotency table in the same ``TransactWriteItems`` as the COMPLETED record and the body's
`idempotent_lambda.transaction.current_transaction` writes:

```python
from idempotent_lambda import idempotent
from idempotent_lambda.outbox import emit
from idempotent_lambda.transaction import current_transaction

@idempotent(persistence_store=store, config=config)
def handler(event, context):
    current_transaction().put("orders", {"pk": event["order_id"], "state": "created"})
    emit("OrderCreated", {"order_id": event["order_id"]}, source="shop.orders")
    return {"order_id": event["order_id"]}
```

`publish_handler` is the Lambda handler of the table's DynamoDB Stream that puts those events
on EventBridge; `sweep_handler`, run on a schedule, publishes those no stream record brought.
Every published event carries its id at ``detail.outbox.id``, where
`idempotent_lambda.event_keys.OUTBOX_EVENT` finds it (with the event's account and source) for
a consumer's idempotency. The Outbox
guide tells the guarantee end to end, its one remaining window, ordering and cost.
"""

from idempotent_lambda._outbox_format import (
    AGE_METRIC,
    DEFAULT_SOURCE,
    OUTBOX_INDEX,
    PENDING_SHARDS,
    OutboxEvent,
)
from idempotent_lambda.outbox._core import (
    MAX_EVENTS,
    STREAM_FILTER_PATTERN,
    emit,
    publish_handler,
    sweep_handler,
)

__all__ = [
    "AGE_METRIC",
    "DEFAULT_SOURCE",
    "MAX_EVENTS",
    "OUTBOX_INDEX",
    "PENDING_SHARDS",
    "STREAM_FILTER_PATTERN",
    "OutboxEvent",
    "emit",
    "publish_handler",
    "sweep_handler",
]
