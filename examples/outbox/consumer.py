from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, event_keys
from idempotent_lambda.adapters.sqs import idempotent_sqs_handler

store = DynamoDBPersistenceLayer("IdempotencyTable")


def send_confirmation(order_id):
    print(f"confirmation sent for {order_id}")


# An SQS queue that an EventBridge rule on OrderCreated feeds.
@idempotent_sqs_handler(
    persistence_store=store,
    config=IdempotencyConfig(event_key_jmespath=event_keys.OUTBOX_EVENT),
)
def handler(record, context):
    event = record.json_body  # the EventBridge event
    send_confirmation(event["detail"]["order_id"])
