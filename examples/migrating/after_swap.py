import uuid

from pydantic import BaseModel

from idempotent_lambda import (  # was: aws_lambda_powertools.utilities.idempotency
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from idempotent_lambda.serialization.pydantic import PydanticSerializer

persistence_layer = DynamoDBPersistenceLayer(table_name="IdempotencyTable")
config = IdempotencyConfig(event_key_jmespath="order_id")


class Order(BaseModel):
    order_id: str
    quantity: int


class Receipt(BaseModel):
    order_id: str
    receipt_id: str


@idempotent_function(
    data_keyword_argument="order",
    persistence_store=persistence_layer,
    config=config,
    output_serializer=PydanticSerializer,
)
def place_order(order: Order) -> Receipt:
    return Receipt(order_id=order.order_id, receipt_id=uuid.uuid4().hex)


def lambda_handler(event, context):
    config.register_lambda_context(context)
    receipt = place_order(order=Order(**event))  # a Receipt, also when replayed
    return receipt.model_dump()
