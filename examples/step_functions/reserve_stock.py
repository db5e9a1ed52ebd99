from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, event_keys, idempotent

store = DynamoDBPersistenceLayer("IdempotencyTable")


def reserve(order_id: str, items: list) -> str:
    """Stand-in for the work that must happen once per execution of the state machine."""
    return f"res-{order_id}"


@idempotent(
    persistence_store=store,
    config=IdempotencyConfig(
        event_key_jmespath=event_keys.STEP_FUNCTIONS_TASK,  # execution_id + state_name
        raise_on_no_idempotency_key=True,  # a payload without them fails, never runs twice
    ),
)
def handler(event: dict, context) -> dict:
    order = event["input"]  # the state's input, passed beside the key fields
    return {"reservation_id": reserve(order["order_id"], order["items"])}
