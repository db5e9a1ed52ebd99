import pytest

from idempotent_lambda.testing import sqs_event


@pytest.fixture
def payments(idempotency_dynamodb_table, import_handler, monkeypatch):
    # idempotency_dynamodb_table made a fresh table on the local server and pointed boto3 at it
    # (AWS_ENDPOINT_URL_DYNAMODB, dummy credentials). Name it as Lambda would, then import the
    # module afresh, so its store is built for this test's table.
    monkeypatch.setenv("IDEMPOTENCY_TABLE", idempotency_dynamodb_table)
    return import_handler("payments")


@pytest.fixture
def captured(payments, monkeypatch):
    calls = []

    def capture(payment_id, amount):
        calls.append((payment_id, amount))
        return f"rcpt_{payment_id}"

    monkeypatch.setattr(payments, "capture", capture)  # the side effect, recorded
    return calls


def test_a_redelivered_message_is_captured_once(payments, captured, lambda_context):
    event = sqs_event(body={"payment_id": "p-1", "amount": "10.00"})
    assert payments.handler(event, lambda_context) == {"batchItemFailures": []}
    assert payments.handler(event, lambda_context) == {"batchItemFailures": []}  # redelivered
    assert captured == [("p-1", "10.00")]


def test_a_duplicate_from_the_producer_replays(payments, captured, lambda_context):
    payment = {"payment_id": "p-2", "amount": "5.00"}
    event = sqs_event(records=[{"body": payment}, {"body": payment}])  # two message ids
    assert payments.handler(event, lambda_context) == {"batchItemFailures": []}
    assert captured == [("p-2", "5.00")]
