from botocore.config import Config

from idempotent_lambda import DynamoDBPersistenceLayer
from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler

# The store's client keeps 32 connections by default: above that, give each lane its own.
store = DynamoDBPersistenceLayer("IdempotencyTable", boto_config=Config(max_pool_connections=64))


def notify(text: str) -> None:
    """Stand-in for a slow downstream call, which the lanes overlap."""


@idempotent_sqs_handler(persistence_store=store, max_concurrency=64)
def handler(record: SQSRecord, context) -> None:
    notify(record.body)
