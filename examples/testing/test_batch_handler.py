from idempotent_lambda.adapters.sqs import idempotent_sqs_handler
from idempotent_lambda.testing import sqs_event


def make_handler(store, runs):
    @idempotent_sqs_handler(persistence_store=store)
    def handler(record, context):
        runs.append(record.message_id)
        return {"order": record.json_body["order_id"]}

    return handler


def test_redelivery_replays(idempotency_store, lambda_context):
    runs = []
    handler = make_handler(idempotency_store, runs)
    event = sqs_event(body={"order_id": 1}, message_id="m-1")
    assert handler(event, lambda_context) == {"batchItemFailures": []}
    assert handler(event, lambda_context) == {"batchItemFailures": []}  # SQS redelivered it
    assert runs == ["m-1"]
