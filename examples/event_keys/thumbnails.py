from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, event_keys, idempotent

store = DynamoDBPersistenceLayer("IdempotencyTable")


def make_thumbnail(bucket: str, key: str) -> str:
    """Stand-in for the work that must happen once per version of an object."""
    return f"thumbnails/{key}"


@idempotent(
    persistence_store=store,
    config=IdempotencyConfig(event_key_jmespath=event_keys.S3),  # bucket + key + sequencer
)
def handler(event: dict, context) -> dict:
    s3 = event["Records"][0]["s3"]
    return {"thumbnail": make_thumbnail(s3["bucket"]["name"], s3["object"]["key"])}
