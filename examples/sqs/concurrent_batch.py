from botocore.config import Config

from idempotent_lambda import DynamoDBPersistenceLayer
from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler

# One connection per worker: botocore keeps 10 by default.
store = DynamoDBPersistenceLayer("IdempotencyTable", boto_config=Config(max_pool_connections=16))


def notify(text: str) -> None:
    """Stand-in for slow I/O, which the workers overlap."""


@idempotent_sqs_handler(persistence_store=store, max_concurrency=16)
def handler(record: SQSRecord, context) -> None:
    notify(record.body)
