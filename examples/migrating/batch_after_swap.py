from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from idempotent_lambda import (  # was: aws_lambda_powertools.utilities.idempotency
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)

processor = BatchProcessor(event_type=EventType.SQS)  # Powertools' batch utility stays
persistence_layer = DynamoDBPersistenceLayer(table_name="IdempotencyTable")
config = IdempotencyConfig(event_key_jmespath="messageId")


def charge(body: str) -> str:
    """Stand-in for the side effect that must happen once per message."""
    return "ch_1"


@idempotent_function(
    data_keyword_argument="record", persistence_store=persistence_layer, config=config
)
def record_handler(record: SQSRecord) -> dict:
    return {"charge_id": charge(record.body)}


def lambda_handler(event, context):
    config.register_lambda_context(context)
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
