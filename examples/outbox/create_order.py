from decimal import Decimal

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent
from idempotent_lambda.outbox import emit
from idempotent_lambda.transaction import current_transaction

store = DynamoDBPersistenceLayer("IdempotencyTable")


@idempotent(persistence_store=store, config=IdempotencyConfig(event_key_jmespath="order_id"))
def handler(event, context):
    order = {"order_id": event["order_id"], "total": Decimal(event["total"]), "status": "NEW"}
    current_transaction().put("orders", order, condition="attribute_not_exists(order_id)")
    # Written in the same TransactWriteItems as the order and the COMPLETED record.
    event_id = emit(
        "OrderCreated",
        {"order_id": event["order_id"], "total": order["total"]},
        source="shop.orders",
    )
    return {"order_id": event["order_id"], "status": "NEW", "event_id": event_id}
