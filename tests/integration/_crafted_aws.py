"""An AWS-compatible HTTP endpoint on 127.0.0.1 that answers what the test crafts.

`CraftedAws.answers` maps an API name (``"DescribeTable"``, ``"GetFunctionConfiguration"``,
``"ListRolePolicies"``, ...) to the answer's fields. DynamoDB, Application Auto Scaling and
Lambda get them as JSON; IAM, a query-protocol service, as the XML botocore parses. A test
points every client at `CraftedAws.url` (`--endpoint-url`), so boto3 parses each answer as it
would AWS's, and whatever a hostile or broken answer holds reaches the code under test.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

import pytest

#: The answers of a healthy one-Region on-demand table, which a test edits.
HEALTHY: dict[str, Any] = {
    "DescribeTable": {
        "Table": {
            "TableName": "crafted",
            "TableArn": "arn:aws:dynamodb:us-east-1:123456789012:table/crafted",
            "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": "id", "AttributeType": "S"}],
            "BillingModeSummary": {"BillingMode": "PAY_PER_REQUEST"},
            "DeletionProtectionEnabled": True,
        }
    },
    "DescribeTimeToLive": {
        "TimeToLiveDescription": {"TimeToLiveStatus": "ENABLED", "AttributeName": "expiration"}
    },
    "DescribeContinuousBackups": {
        "ContinuousBackupsDescription": {
            "ContinuousBackupsStatus": "ENABLED",
            "PointInTimeRecoveryDescription": {"PointInTimeRecoveryStatus": "ENABLED"},
        }
    },
    "DescribeScalableTargets": {"ScalableTargets": []},
    "GetFunctionConfiguration": {"Role": "arn:aws:iam::123456789012:role/orders"},
    "ListRolePolicies": {"PolicyNames": ["idempotency"], "IsTruncated": "false"},
    "GetRolePolicy": {
        "RoleName": "orders",
        "PolicyName": "idempotency",
        "PolicyDocument": json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Action": ["dynamodb:*"],
                        "Resource": "arn:aws:dynamodb:us-east-1:123456789012:table/crafted",
                    }
                ],
            }
        ),
    },
    "ListAttachedRolePolicies": {"AttachedPolicies": [], "IsTruncated": "false"},
}


class CraftedAws:
    """The endpoint; `answers` is read on every request, so a test may change it at any time."""

    def __init__(self) -> None:
        self.answers: dict[str, Any] = json.loads(json.dumps(HEALTHY))
        self.asked: list[str] = []
        crafted = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                target = self.headers.get("X-Amz-Target")
                if target:  # DynamoDB and Application Auto Scaling: JSON
                    self._json(target.rsplit(".", 1)[1])
                else:  # IAM: a form with the action, answered as XML
                    action = parse_qs(body.decode())["Action"][0]
                    self._xml(action)

            def do_GET(self) -> None:  # Lambda's REST API
                if self.path.endswith("/configuration"):
                    self._json("GetFunctionConfiguration")
                else:
                    self.send_error(404)

            def _json(self, api: str) -> None:
                self._send(api, json.dumps(crafted.answer(api)).encode(), "application/json")

            def _xml(self, action: str) -> None:
                inner = _xml(crafted.answer(action))
                text = (
                    f'<{action}Response xmlns="https://iam.amazonaws.com/doc/2010-05-08/">'
                    f"<{action}Result>{inner}</{action}Result>"
                    "<ResponseMetadata><RequestId>r</RequestId></ResponseMetadata>"
                    f"</{action}Response>"
                )
                self._send(action, text.encode(), "text/xml")

            def _send(self, api: str, data: bytes, content_type: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, api: str) -> Any:
        """Return the crafted answer of ``api``, noting that it was asked."""
        self.asked.append(api)
        return self.answers.get(api, {})


def _xml(value: Any) -> str:
    """Write ``value`` as query-protocol XML: keys as elements, a list's items as members."""
    if isinstance(value, dict):
        return "".join(f"<{name}>{_xml(item)}</{name}>" for name, item in value.items())
    if isinstance(value, list):
        return "".join(f"<member>{_xml(item)}</member>" for item in value)
    return escape(str(value))


@pytest.fixture
def crafted_aws() -> Iterator[CraftedAws]:
    """Yield a running `CraftedAws`, answering a healthy table until the test changes that."""
    crafted = CraftedAws()
    thread = threading.Thread(target=crafted.server.serve_forever, daemon=True)
    thread.start()
    yield crafted
    crafted.server.shutdown()
    crafted.server.server_close()
