from idempotent_lambda import IdempotencyConfig, idempotent


def make_handler(store, runs):
    @idempotent(persistence_store=store, config=IdempotencyConfig(event_key_jmespath="order_id"))
    def handler(event, context):
        runs.append(event["order_id"])
        return {"order_id": event["order_id"], "created": True}

    return handler


def test_retry_replays(idempotency_store, lambda_context):
    runs = []
    handler = make_handler(idempotency_store, runs)
    first = handler({"order_id": 1}, lambda_context)
    assert first == handler({"order_id": 1}, lambda_context)
    assert runs == [1]  # the body ran once


def test_runs_again_after_expiry(idempotency_store, idempotency_clock, lambda_context):
    runs = []
    handler = make_handler(idempotency_store, runs)
    handler({"order_id": 1}, lambda_context)
    idempotency_clock.advance(seconds=3601)  # past expires_after_seconds, without sleeping
    handler({"order_id": 1}, lambda_context)
    assert runs == [1, 1]
