from aws_lambda_powertools import Logger

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent

logger = Logger(service="orders")
store = DynamoDBPersistenceLayer("IdempotencyTable")
config = IdempotencyConfig(event_key_jmespath="order_id", logger=logger)


@logger.inject_lambda_context  # decision lines carry the request id, like your own lines
@idempotent(persistence_store=store, config=config)
def handler(event, context):
    logger.info("order accepted")
    return {"order_id": event["order_id"], "status": "ACCEPTED"}
