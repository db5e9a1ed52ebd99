from aws_lambda_powertools import Metrics

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent
from idempotent_lambda.metrics import PowertoolsMetricsHook

metrics = Metrics(namespace="Orders", service="orders")
store = DynamoDBPersistenceLayer("IdempotencyTable")
config = IdempotencyConfig(
    event_key_jmespath="order_id", decision_hook=PowertoolsMetricsHook(metrics)
)


@metrics.log_metrics  # flushes the idempotency metrics with your own, in one document
@idempotent(persistence_store=store, config=config)
def handler(event, context):
    return {"order_id": event["order_id"], "status": "ACCEPTED"}
