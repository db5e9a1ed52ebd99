"""The same workflow, with ClaimsPlugin selected by the function's environment.

The function's configuration sets DURABLE_EXECUTION_PLUGINS=idempotent_lambda.claims; the SDK
finds the plugin through the entry point idempotent-lambda installs, so the code registers
nothing.
"""

from aws_durable_execution_sdk_python import DurableContext, durable_execution

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent

persistence_layer = DynamoDBPersistenceLayer(table_name="IdempotencyTable")


def ship(order_id):
    """The carrier's call: the side effect that must happen once per order."""
    return {"tracking_id": f"trk_{order_id}"}


@durable_execution
@idempotent(
    persistence_store=persistence_layer,
    config=IdempotencyConfig(event_key_jmespath="order_id"),
)
def handler(event, context: DurableContext):
    if event.get("cancelled"):
        raise ValueError("the order was cancelled")  # fails the execution: the claim goes
    shipment = context.step(lambda _: ship(event["order_id"]), name="ship")
    return {"order_id": event["order_id"], "shipment": shipment}
