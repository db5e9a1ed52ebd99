"""docs/http.md: an HTTP API behind a Lambda authorizer names its caller with ``caller=``.

The authorizer returned ``{"isAuthorized": true, "context": {"userId": ...}}``; API Gateway puts
that context under ``requestContext.authorizer.lambda``. Without ``caller=`` the adapter cannot
tell users apart there and answers 500; with it, each user gets a key space of their own.
"""

from __future__ import annotations

import json
from typing import Any

from idempotent_lambda import InMemoryPersistenceLayer
from idempotent_lambda.adapters.api_gateway import idempotent_http

store = InMemoryPersistenceLayer()


@idempotent_http(persistence_store=store, caller="requestContext.authorizer.lambda.userId")
def create_order(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Create an order once per (user, Idempotency-Key)."""
    order = json.loads(event["body"])
    return {"statusCode": 201, "body": json.dumps({"sku": order["sku"], "by": "handler"})}


def request(user: str, key: str) -> dict[str, Any]:
    """An HTTP API (payload 2.0) request from ``user`` through the Lambda authorizer."""
    return {
        "version": "2.0",
        "routeKey": "POST /orders",
        "rawPath": "/orders",
        "rawQueryString": "",
        "headers": {"content-type": "application/json", "idempotency-key": key},
        "requestContext": {
            "apiId": "r3pmxmplak",
            "stage": "prod",
            "http": {"method": "POST", "path": "/orders"},
            "authorizer": {"lambda": {"userId": user}},
        },
        "body": '{"sku": "A1"}',
        "isBase64Encoded": False,
    }


if __name__ == "__main__":
    first = create_order(request("alice", "8e03978e-40d5"), None)
    retry = create_order(request("alice", "8e03978e-40d5"), None)
    other = create_order(request("bob", "8e03978e-40d5"), None)
    print(
        first["statusCode"],
        retry["headers"]["Idempotent-Replayed"],
        "Idempotent-Replayed" in other.get("headers", {}),
    )
