"""Realistic API Gateway REST (v1) proxy events, small (~3 KB) and large (~200 KB).

Both libraries see the very same event objects. The body is a JSON string carrying an
``order_id`` (the idempotency key, via ``powertools_json(body).order_id``); events meant for the
first-call path differ only in that id.
"""

from __future__ import annotations

import json
from typing import Any

KEY_EXPRESSION = "powertools_json(body).order_id"
VALIDATION_EXPRESSION = "powertools_json(body)"

_HEADERS = {
    "Accept": "application/json",
    "Accept-Encoding": "gzip, deflate, br",
    "Accept-Language": "en-GB,en;q=0.9",
    "Authorization": "Bearer eyJraWQiOiJrMSIsImFsZyI6IlJTMjU2In0.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl",
    "CloudFront-Forwarded-Proto": "https",
    "CloudFront-Is-Desktop-Viewer": "true",
    "CloudFront-Is-Mobile-Viewer": "false",
    "CloudFront-Viewer-Country": "IE",
    "Content-Type": "application/json",
    "Host": "abcdef1234.execute-api.eu-west-1.amazonaws.com",
    "Idempotency-Key": "8e03978e-40d5-43e8-bc93-6894a57f9324",
    "User-Agent": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko)",
    "X-Amz-Cf-Id": "nBsWBOrSHMgnaROZJK1wGCZ9PcRcSpq_oSXZNQwQ10OTZL4cimZo3g==",
    "X-Amzn-Trace-Id": "Root=1-5e66d96f-7491f09xmpl79d18acf3d050",
    "X-Forwarded-For": "52.255.255.12, 198.51.100.17",
    "X-Forwarded-Port": "443",
    "X-Forwarded-Proto": "https",
}


def _item(index: int) -> dict[str, Any]:
    return {
        "sku": f"SKU-{index:06d}",
        "name": f"Widget model {index} (blue, large)",
        "quantity": index % 7 + 1,
        "unit_price": round(3.5 + index * 0.25, 2),
        "currency": "EUR",
        "tags": ["hardware", "blue", f"batch-{index % 13}"],
        "gift_wrap": index % 5 == 0,
    }


def _body_tail(item_count: int) -> str:
    """Return the body JSON after ``{"order_id":"…",`` (the part every event shares)."""
    body = {
        "customer": {
            "id": "cust-0042",
            "email": "jane.doe@example.com",
            "name": "Jane Doe",
            "address": {"line1": "1 Main Street", "city": "Dublin", "postcode": "D01 F5P2"},
        },
        "items": [_item(i) for i in range(item_count)],
        "payment": {"method": "card", "token": "tok_1NirD82eZvKYlo2CIvbtLWuY", "amount": 129.99},
        "note": "Leave at the door",
    }
    return json.dumps(body, separators=(",", ":"))[1:]


def _event(body: str) -> dict[str, Any]:
    return {
        "resource": "/orders",
        "path": "/orders",
        "httpMethod": "POST",
        "headers": dict(_HEADERS),
        "multiValueHeaders": {name: [value] for name, value in _HEADERS.items()},
        "queryStringParameters": {"source": "web"},
        "multiValueQueryStringParameters": {"source": ["web"]},
        "pathParameters": None,
        "stageVariables": None,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "abcdef1234",
            "authorizer": {
                "claims": {
                    "sub": "7d6c2d4e-1234-4f1a-9a4b-0123456789ab",
                    "email": "jane.doe@example.com",
                    "cognito:username": "jane",
                }
            },
            "domainName": "abcdef1234.execute-api.eu-west-1.amazonaws.com",
            "extendedRequestId": "BQGojGkyIAMFQ3w=",
            "httpMethod": "POST",
            "identity": {
                "sourceIp": "52.255.255.12",
                "userAgent": "Mozilla/5.0 (X11; Linux x86_64)",
                "accountId": None,
                "caller": None,
                "user": None,
                "userArn": None,
            },
            "path": "/prod/orders",
            "protocol": "HTTP/1.1",
            "requestId": "c6af9ac6-7b61-11e6-9a41-93e8deadbeef",
            "requestTime": "09/Apr/2025:12:34:56 +0000",
            "requestTimeEpoch": 1744202096000,
            "resourceId": "2gxmpl",
            "resourcePath": "/orders",
            "stage": "prod",
        },
        "body": body,
        "isBase64Encoded": False,
    }


class EventFactory:
    """Builds events of one size that differ only in their order id.

    Args:
        name: Label used in the results (``"small"``/``"large"``).
        item_count: Number of line items in the body; sets the size.
    """

    def __init__(self, name: str, item_count: int) -> None:
        self.name = name
        self._tail = _body_tail(item_count)
        self._template = _event("")

    def make(self, order_id: str) -> dict[str, Any]:
        """Return an event whose body has ``order_id`` (nested parts shared with the template)."""
        event = dict(self._template)
        event["body"] = f'{{"order_id":"{order_id}",{self._tail}'
        return event

    def size_bytes(self) -> int:
        """Return the size of an event as JSON text."""
        return len(json.dumps(self.make("ord-000000")).encode())


def event_factories() -> list[EventFactory]:
    """Return the small (~3 KB) and large (~200 KB) event factories."""
    return [EventFactory("small", 2), EventFactory("large", 1050)]
