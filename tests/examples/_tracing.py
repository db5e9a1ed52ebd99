"""The runner of examples/tracing/otlp_exporter.py: its spans reach an OTLP/HTTP receiver.

The example sets the process's tracer provider, which can be set only once: it runs in a child
process, exporting to a receiver on 127.0.0.1 that keeps what each request posts.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CHILD = """
import runpy, sys
from idempotent_lambda.testing import FakeLambdaContext
example = runpy.run_path(sys.argv[1])
event = {"order_id": sys.argv[2]}
first = example["handler"](event, FakeLambdaContext())
assert first == example["handler"](event, FakeLambdaContext())
"""


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    """Yield an OTLP/HTTP endpoint on 127.0.0.1 and the ``(path, body)`` of each request."""
    received: list[tuple[str, bytes]] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            received.append((self.path, self.rfile.read(length)))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


def run_otlp_exporter(module_path: Path, aws: str) -> None:
    """Two calls with one order id: their spans (claimed, replayed) arrive over OTLP."""
    import os

    with otlp_receiver() as (endpoint, received):
        environment = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
        order_id = uuid.uuid4().hex
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(module_path), order_id],
            env=environment,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
    assert 0 == done.returncode, done.stderr
    assert received, "no OTLP request"
    assert {"/v1/traces"} == {path for path, _ in received}
    sent = b"".join(body for _, body in received)
    for expected in (b"POST /orders", b"idempotency.outcome", b"CLAIMED", b"REPLAYED"):
        assert expected in sent, expected
    assert order_id.encode() not in sent  # the payload never is
