import boto3

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, event_keys
from idempotent_lambda.adapters.sqs import idempotent_sqs_handler
from idempotent_lambda.transaction import current_transaction

store = DynamoDBPersistenceLayer("IdempotencyTable")
views = boto3.resource("dynamodb").Table("order_views")


class NotYetError(Exception):
    """An event that arrived before the one it follows: SQS delivers it again later."""


# The producer writes each order change with `condition="version = :seen"` and emits the new
# version in the event's detail: versions are gap-free, in commit order.
@idempotent_sqs_handler(
    persistence_store=store,
    config=IdempotencyConfig(event_key_jmespath=event_keys.OUTBOX_EVENT),
)
def handler(record, context):
    detail = record.json_body["detail"]
    order_id, version = detail["order_id"], detail["version"]
    applied = views.get_item(Key={"order_id": order_id}, ConsistentRead=True).get("Item", {})
    seen = int(applied.get("version", 0))
    if version <= seen:
        return "stale"  # an older change: already reflected in the view
    if version != seen + 1:
        raise NotYetError(f"order {order_id}: version {version} waits for {seen + 1}")
    current_transaction().put(
        "order_views",
        {"order_id": order_id, "version": version, "state": detail["state"]},
        condition="attribute_not_exists(order_id) OR version = :seen",
        values={":seen": seen},
    )
    return "applied"
