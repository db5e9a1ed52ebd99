"""An endpoint of the tests' own on 127.0.0.1 that answers some requests as IAM would deny them.

moto does not enforce IAM. `DenyProxy` forwards every request to moto's server untouched,
except those its rule refuses: those get the ``AccessDeniedException`` DynamoDB answers. Rules
see the request's target (``DynamoDB_20120810.Scan``) and its JSON body, so a rule can deny as
a ``dynamodb:LeadingKeys`` condition would: a ``BatchGetItem`` is refused whole when one of its
keys lies outside the granted prefixes, as DynamoDB authorises every key of the request.
"""

from __future__ import annotations

import fnmatch
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: Straight to moto, whatever proxy the environment names.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
#: A rule: (operation, body) -> True when IAM would deny it.
Rule = Callable[[str, dict[str, Any]], bool]


def denies(*operations: str) -> Rule:
    """Deny these operations outright (``Scan``, ``ListRolePolicies``...)."""
    return lambda operation, body: operation in operations


def leading_keys(partition_attr: str, patterns: Iterable[str]) -> Rule:
    """Deny a ``BatchGetItem`` or ``UpdateItem`` touching a partition outside ``patterns``.

    ``patterns`` are ``StringLike`` patterns of a ``dynamodb:LeadingKeys`` condition
    (``orders#*``).
    """
    allowed = list(patterns)

    def outside(key: dict[str, Any]) -> bool:
        value = key.get(partition_attr, {}).get("S", "")
        return not any(fnmatch.fnmatchcase(value, p) for p in allowed)

    def rule(operation: str, body: dict[str, Any]) -> bool:
        if operation == "BatchGetItem":
            keys = [k for table in body["RequestItems"].values() for k in table["Keys"]]
            return any(outside(k) for k in keys)
        if operation == "UpdateItem":
            return outside(body["Key"])
        return False

    return rule


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(length)
        target = self.headers.get("X-Amz-Target", "")
        try:
            body = json.loads(data or b"{}")
        except ValueError:  # a query-protocol API (IAM): the action is a form field
            body = {k: v[0] for k, v in urllib.parse.parse_qs(data.decode()).items()}
        operation = target.rsplit(".", 1)[-1] if target else str(body.get("Action", ""))
        if isinstance(body, dict) and self.server.rule(operation, body):
            self.server.denied.append(operation)
            message = f"not authorized to perform: {operation} (DenyProxy)"
            if target:  # a JSON-protocol API (DynamoDB)
                answer = json.dumps(
                    {"__type": "com.amazon.coral.service#AccessDeniedException", "message": message}
                ).encode()
                self._answer(400, {"Content-Type": "application/x-amz-json-1.0"}, answer)
                return
            answer = (  # a query-protocol API (IAM) answers in XML
                "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>"
                f"<Message>{message}</Message></Error><RequestId>1</RequestId></ErrorResponse>"
            ).encode()
            self._answer(403, {"Content-Type": "text/xml"}, answer)
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
        request = urllib.request.Request(
            self.server.upstream + self.path, data=data, headers=headers, method="POST"
        )
        try:
            with _DIRECT.open(request, timeout=30) as response:
                self._answer(response.status, dict(response.headers), response.read())
        except urllib.error.HTTPError as error:
            self._answer(error.code, dict(error.headers), error.read())

    def _answer(self, status: int, headers: dict[str, str], data: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    upstream: str
    rule: Rule
    denied: list[str]


@contextmanager
def deny_proxy(upstream: str, rule: Rule) -> Iterator[tuple[str, list[str]]]:
    """Serve the proxy; yield its endpoint and the list of operations it denied."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.upstream = upstream.rstrip("/")
    server.rule = rule
    server.denied = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.denied
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
