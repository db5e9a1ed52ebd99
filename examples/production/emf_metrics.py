from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent
from idempotent_lambda.metrics import EMFMetrics

metrics = EMFMetrics("Orders", service="orders")  # the namespace, then dimensions
config = IdempotencyConfig(event_key_jmespath="order_id", decision_hook=metrics)


@idempotent(persistence_store=DynamoDBPersistenceLayer("IdempotencyTable"), config=config)
def handler(event, context):
    return {"order_id": event["order_id"], "status": "ACCEPTED"}
