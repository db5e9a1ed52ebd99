from idempotent_lambda import DynamoDBPersistenceLayer
from idempotent_lambda.adapters.kinesis import KinesisRecord, idempotent_kinesis_handler

store = DynamoDBPersistenceLayer("IdempotencyTable")


def add_click(user_id: str, page: str) -> None:
    """Stand-in for the side effect that must happen once per record."""


@idempotent_kinesis_handler(persistence_store=store)
def handler(record: KinesisRecord, context) -> None:
    click = record.json_data  # the data, base64-decoded and parsed once
    add_click(record.partition_key, click["page"])  # one user's clicks run in order
