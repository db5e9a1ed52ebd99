from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent_function

store = DynamoDBPersistenceLayer(table_name="IdempotencyTable")
config = IdempotencyConfig(event_key_jmespath="order_id")


def send_email(address: str, order_id: str) -> str:
    """Stand-in for the side effect that must happen once per order."""
    return f"msg_{order_id}"


@idempotent_function(data_keyword_argument="order", persistence_store=store, config=config)
def send_receipt(order: dict) -> dict:
    message_id = send_email(order["email"], order["order_id"])
    return {"order_id": order["order_id"], "message_id": message_id}


def handler(event, context):
    config.register_lambda_context(context)  # leases end when this invocation would time out
    return [send_receipt(order=order) for order in event["orders"]]
