from idempotent_lambda import DynamoDBPersistenceLayer
from idempotent_lambda.adapters.dynamodb_stream import (
    DynamoDBStreamRecord,
    idempotent_stream_handler,
)

store = DynamoDBPersistenceLayer("IdempotencyTable")


def send_welcome(address: str) -> None:
    """Stand-in for the side effect that must happen once per new user."""


@idempotent_stream_handler(persistence_store=store)
def handler(record: DynamoDBStreamRecord, context) -> None:
    if record.is_ttl_removal:
        return  # expired by TTL, not deleted by a user
    if record.event_name == "INSERT":
        send_welcome(record.new_image["email"])
