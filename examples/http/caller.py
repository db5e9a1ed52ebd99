import json
import uuid

from idempotent_lambda import DynamoDBPersistenceLayer
from idempotent_lambda.adapters.api_gateway import idempotent_http

store = DynamoDBPersistenceLayer(table_name="IdempotencyTable")


# An HTTP API Lambda authorizer returned {"isAuthorized": true, "context": {"userId": ...}}.
# API Gateway puts that context under requestContext.authorizer.lambda, where the adapter finds
# no caller of its own: name the field, and each user gets a key space of their own.
@idempotent_http(persistence_store=store, caller="requestContext.authorizer.lambda.userId")
def handler(event, context):
    order = json.loads(event["body"])
    order_id = uuid.uuid4().hex
    return {"statusCode": 201, "body": json.dumps({"order_id": order_id, "sku": order["sku"]})}
