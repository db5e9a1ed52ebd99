import json

import pytest

from idempotent_lambda.testing import api_gateway_http_event


@pytest.fixture
def idempotency_table_name():
    return "IdempotencyTable"  # create_order.py names its table itself: use that name


@pytest.fixture
def create_order(idempotency_dynamodb_table, import_handler):
    # A fresh IdempotencyTable on the local server, boto3 pointed at it: import the module
    # afresh, as Lambda does, so its store is built now.
    return import_handler("create_order")


def test_a_retry_gets_the_same_order(create_order, lambda_context):
    event = api_gateway_http_event(body={"sku": "A1"}, idempotency_key="k-1")
    first = create_order.handler(event, lambda_context)
    retry = create_order.handler(event, lambda_context)
    assert first["statusCode"] == retry["statusCode"] == 201
    assert retry["body"] == first["body"]  # the same order id: created once
    assert retry["headers"]["Idempotent-Replayed"] == "true"


def test_the_same_key_with_another_body_is_refused(create_order, lambda_context):
    first = api_gateway_http_event(body={"sku": "A1"}, idempotency_key="k-1")
    create_order.handler(first, lambda_context)
    changed = api_gateway_http_event(body={"sku": "B2"}, idempotency_key="k-1")
    assert create_order.handler(changed, lambda_context)["statusCode"] == 422


def test_a_request_without_a_key_is_refused(create_order, lambda_context):
    missing = api_gateway_http_event(idempotency_key=False)
    assert create_order.handler(missing, lambda_context)["statusCode"] == 400


def test_callers_do_not_share_keys(create_order, lambda_context):
    orders = [
        create_order.handler(
            api_gateway_http_event(body={"sku": "A1"}, idempotency_key="k-1", claims={"sub": user}),
            lambda_context,
        )
        for user in ("alice", "bob")
    ]
    alice, bob = (json.loads(order["body"])["order_id"] for order in orders)
    assert alice != bob  # the same key from two JWT subjects is two requests
