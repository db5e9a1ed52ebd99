import os

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig
from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler

# Built once per execution environment, when Lambda imports the module; the table's name comes
# from the function's environment (template.yaml sets IDEMPOTENCY_TABLE).
store = DynamoDBPersistenceLayer(os.environ["IDEMPOTENCY_TABLE"])


def capture(payment_id: str, amount: str) -> str:
    """Stand-in for the side effect that must happen once per payment."""
    return f"rcpt_{payment_id}"


@idempotent_sqs_handler(
    persistence_store=store,
    config=IdempotencyConfig(event_key_jmespath="powertools_json(body).payment_id"),
)
def handler(record: SQSRecord, context) -> dict:
    payment = record.json_body
    return {"receipt_id": capture(payment["payment_id"], payment["amount"])}
