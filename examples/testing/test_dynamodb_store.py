from idempotent_lambda import IdempotencyConfig, idempotent


def test_retry_replays_from_dynamodb(idempotency_dynamodb_store, lambda_context):
    runs = []

    @idempotent(
        persistence_store=idempotency_dynamodb_store,
        config=IdempotencyConfig(event_key_jmespath="order_id"),
    )
    def handler(event, context):
        runs.append(event["order_id"])
        return {"order_id": event["order_id"]}

    assert handler({"order_id": "o-1"}, lambda_context) == handler(
        {"order_id": "o-1"}, lambda_context
    )
    assert runs == ["o-1"]  # the second call was answered from the table
