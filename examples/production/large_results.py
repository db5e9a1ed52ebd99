import hashlib

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent

store = DynamoDBPersistenceLayer(
    "IdempotencyTable",
    large_result_bucket="my-idempotency-results",  # required to offload
    large_result_prefix="idempotency/",  # the default
    large_result_threshold_bytes=None,  # the default: what an item holds (400,000 bytes)
    s3_client=None,  # the default: built on first use
)


# Offloading is the native format's (a table no Powertools code reads): Powertools cannot read it.
config = IdempotencyConfig(record_format="native", event_key_jmespath="report_id")


@idempotent(persistence_store=store, config=config)
def handler(event, context):
    # Stands in for a large report: ~1.4 MB of JSON that compresses poorly, so it goes to S3.
    rows = [hashlib.sha256(f"{event['report_id']}:{n}".encode()).hexdigest() for n in range(20_000)]
    return {"report_id": event["report_id"], "rows": rows}
