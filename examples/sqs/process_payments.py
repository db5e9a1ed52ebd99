from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig
from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler

store = DynamoDBPersistenceLayer("IdempotencyTable")


def capture(payment_id: str, amount: str) -> str:
    """Stand-in for the side effect that must happen once per payment."""
    return f"rcpt_{payment_id}"


@idempotent_sqs_handler(
    persistence_store=store,
    config=IdempotencyConfig(event_key_jmespath="powertools_json(body).payment_id"),
)
def handler(record: SQSRecord, context) -> dict:
    payment = record.json_body  # parsed once, on first access
    receipt_id = capture(payment["payment_id"], payment["amount"])
    return {"receipt_id": receipt_id}  # stored, and replayed to duplicates
