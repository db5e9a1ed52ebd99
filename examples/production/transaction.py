from decimal import Decimal

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent
from idempotent_lambda.transaction import current_transaction

store = DynamoDBPersistenceLayer("IdempotencyTable")


@idempotent(persistence_store=store, config=IdempotencyConfig(event_key_jmespath="order_id"))
def handler(event, context):
    order = {"order_id": event["order_id"], "total": Decimal(event["total"]), "status": "NEW"}
    # Both writes commit with the COMPLETED record in one TransactWriteItems, or none does.
    current_transaction().put("orders", order, condition="attribute_not_exists(order_id)")
    current_transaction().update(
        "stock",
        {"sku": event["sku"]},
        "SET qty = qty - :n",
        condition="qty >= :n",
        values={":n": 1},
    )
    return {"order_id": event["order_id"], "status": "NEW"}
