import json
import uuid

from idempotent_lambda import DynamoDBPersistenceLayer
from idempotent_lambda.adapters.api_gateway import idempotent_http

store = DynamoDBPersistenceLayer(table_name="IdempotencyTable")


@idempotent_http(persistence_store=store)  # the client sends an Idempotency-Key header
def handler(event, context):
    order = json.loads(event["body"])
    order_id = uuid.uuid4().hex  # stands in for creating the order: must happen once per key
    return {"statusCode": 201, "body": json.dumps({"order_id": order_id, "sku": order["sku"]})}
