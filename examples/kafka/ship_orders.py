from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig
from idempotent_lambda.adapters.kafka import KafkaRecord, idempotent_kafka_handler

store = DynamoDBPersistenceLayer("IdempotencyTable")


def ship(order_id: str, address: str) -> str:
    """Stand-in for the side effect that must happen once per order."""
    return f"shp_{order_id}"


@idempotent_kafka_handler(
    persistence_store=store,
    config=IdempotencyConfig(
        event_key_jmespath="powertools_json(powertools_base64(value)).order_id"
    ),
)
def handler(record: KafkaRecord, context) -> dict:
    order = record.json_value  # the value, base64-decoded and parsed once
    return {"shipment_id": ship(order["order_id"], order["address"])}  # replayed to duplicates
