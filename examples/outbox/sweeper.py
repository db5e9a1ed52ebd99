from idempotent_lambda import DynamoDBPersistenceLayer
from idempotent_lambda.outbox import sweep_handler

store = DynamoDBPersistenceLayer("IdempotencyTable")

# The handler of a function run every 5 minutes (an EventBridge schedule): it publishes the
# events no stream record brought, found by age in the index of unpublished items. Name the
# key prefixes it serves with key_prefixes=[...] to query only theirs (and grant only theirs).
handler = sweep_handler(store)
