from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig
from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler

persistence_layer = DynamoDBPersistenceLayer(table_name="IdempotencyTable")
config = IdempotencyConfig(event_key_jmespath="messageId")  # the config BatchProcessor had


def charge(body: str) -> str:
    """Stand-in for the side effect that must happen once per message."""
    return "ch_1"


# Same module, same function name and config as the BatchProcessor version: each message's key
# is the one Powertools' idempotent_function stored, so what it processed replays.
@idempotent_sqs_handler(
    persistence_store=persistence_layer, config=config, source_scope="powertools"
)
def record_handler(record: SQSRecord, context) -> dict:
    return {"charge_id": charge(record.body)}


lambda_handler = record_handler  # the function's handler setting stays app.lambda_handler
