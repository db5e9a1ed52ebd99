"""Charge an order once per order id, with records in Redis; every retry gets the same receipt."""

import os
import uuid

from idempotent_lambda import IdempotencyConfig, idempotent
from idempotent_lambda.persistence.redis import RedisCachePersistenceLayer

persistence_layer = RedisCachePersistenceLayer(
    host=os.environ.get("REDIS_HOST", "localhost"),
    port=int(os.environ.get("REDIS_PORT", "6379")),
    ssl=os.environ.get("REDIS_TLS", "true") == "true",  # TLS unless told otherwise
)
config = IdempotencyConfig(event_key_jmespath="order_id", expires_after_seconds=3600)


@idempotent(persistence_store=persistence_layer, config=config)
def handler(event, context):
    return {"order_id": event["order_id"], "receipt": uuid.uuid4().hex}
