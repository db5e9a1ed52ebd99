import json
import uuid

import boto3
import pytest

from idempotent_lambda.testing import RuleQueue, TableStream


@pytest.fixture
def idempotency_table_name():
    return "IdempotencyTable"  # the name the example modules' stores use


@pytest.fixture
def stream(idempotency_dynamodb_table):
    # The plugin's fresh table, on moto's server, with boto3 pointed at it. Give it the stream
    # the publisher reads, and the orders table create_order writes to.
    dynamodb = boto3.client("dynamodb")
    dynamodb.update_table(
        TableName=idempotency_dynamodb_table,
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
    )
    if "orders" not in dynamodb.list_tables()["TableNames"]:
        dynamodb.create_table(
            TableName="orders",
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": "order_id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "order_id", "KeyType": "HASH"}],
        )
    return TableStream.of_table(idempotency_dynamodb_table)  # reads what is written from now


@pytest.fixture
def order_created(stream):
    # What the deployed rule does: OrderCreated of shop.orders to the consumer's queue.
    with RuleQueue({"source": ["shop.orders"], "detail-type": ["OrderCreated"]}) as queue:
        yield queue


def test_an_order_s_event_takes_effect_once(
    stream, order_created, import_handler, lambda_context, capsys
):
    create_order = import_handler("create_order")
    publisher = import_handler("publisher")
    consumer = import_handler("consumer")
    order = {"order_id": str(uuid.uuid4()), "total": "25.00"}

    created = create_order.handler(order, lambda_context)
    assert create_order.handler(order, lambda_context) == created  # a retry: no second event

    batch = stream.next_event()  # the table's real stream records, as Lambda delivers them
    assert publisher.handler(batch, lambda_context) == {"batchItemFailures": []}
    assert publisher.handler(batch, lambda_context) == {"batchItemFailures": []}  # redelivered

    delivered = order_created.receive()  # what EventBridge put on the queue
    (message,) = delivered["Records"]
    assert json.loads(message["body"])["detail"]["outbox"]["id"] == created["event_id"]
    capsys.readouterr()
    for _ in range(2):  # SQS delivers it twice: one confirmation
        assert consumer.handler(delivered, lambda_context) == {"batchItemFailures": []}
    order_created.settle(delivered, {"batchItemFailures": []})
    assert capsys.readouterr().out == f"confirmation sent for {order['order_id']}\n"
    assert order_created.receive() == {"Records": []}
