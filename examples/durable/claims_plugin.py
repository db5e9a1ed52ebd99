"""A durable workflow whose claim is kept through the SDK's final answer (plugins=[...])."""

from aws_durable_execution_sdk_python import DurableContext, durable_execution

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent
from idempotent_lambda.durable import ClaimsPlugin

persistence_layer = DynamoDBPersistenceLayer(table_name="IdempotencyTable")


def ship(order_id):
    """The carrier's call: the side effect that must happen once per order."""
    return {"tracking_id": f"trk_{order_id}"}


@durable_execution(plugins=[ClaimsPlugin()])
@idempotent(
    persistence_store=persistence_layer,
    config=IdempotencyConfig(event_key_jmespath="order_id"),
)
def handler(event, context: DurableContext):
    if event.get("cancelled"):
        raise ValueError("the order was cancelled")  # fails the execution: the claim goes
    shipment = context.step(lambda _: ship(event["order_id"]), name="ship")
    return {"order_id": event["order_id"], "shipment": shipment}
