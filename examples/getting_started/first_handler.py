import json

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent

store = DynamoDBPersistenceLayer(table_name="IdempotencyTable")
config = IdempotencyConfig(
    event_key_jmespath="powertools_json(body).payment_id",  # what identifies a request
    payload_validation_jmespath="powertools_json(body).amount",  # must match on a retry
)


def charge(payment_id: str, amount: str) -> str:
    """Stand-in for the side effect that must happen once: a call to a payment provider."""
    return f"ch_{payment_id}"


@idempotent(persistence_store=store, config=config)
def handler(event, context):
    payment = json.loads(event["body"])
    charge_id = charge(payment["payment_id"], payment["amount"])  # runs once per payment_id
    return {"statusCode": 201, "body": json.dumps({"charge_id": charge_id})}
