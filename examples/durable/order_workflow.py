"""A two-step order workflow: each side effect runs once per execution, whatever is replayed."""

from aws_durable_execution_sdk_python import DurableContext, durable_execution

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent
from idempotent_lambda.durable import idempotent_step, step, step_key

persistence_layer = DynamoDBPersistenceLayer(table_name="IdempotencyTable")


def charge_card(order_id, amount, idempotency_key):
    """The payment provider's call; it takes our step key as its own idempotency key."""
    return {"charge_id": f"ch_{order_id}", "amount": amount}


def send_receipt(order_id, charge_id):
    return {"message_id": f"msg_{order_id}_{charge_id}"}


@idempotent_step(persistence_store=persistence_layer)
def charge(step_context, order_id, amount):
    return charge_card(order_id, amount, idempotency_key=step_key())


@durable_execution
@idempotent(
    persistence_store=persistence_layer,
    config=IdempotencyConfig(event_key_jmespath="order_id"),
)
def handler(event, context: DurableContext):
    order_id, amount = event["order_id"], event["amount"]
    charged = step(
        context, charge(order_id, amount), payload={"order_id": order_id, "amount": amount}
    )
    receipt = step(
        context,
        lambda _: send_receipt(order_id, charged["charge_id"]),
        name="receipt",
        persistence_store=persistence_layer,
    )
    return {"order_id": order_id, "charge": charged, "receipt": receipt}
