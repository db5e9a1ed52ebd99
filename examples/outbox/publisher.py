from idempotent_lambda import DynamoDBPersistenceLayer
from idempotent_lambda.outbox import publish_handler

store = DynamoDBPersistenceLayer("IdempotencyTable")

# The Lambda handler of the IdempotencyTable stream's event source mapping.
handler = publish_handler(store)
