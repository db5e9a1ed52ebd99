"""Fail chosen DynamoDB requests of a real botocore client, inside its real retry loop.

`FaultInjector` hooks botocore's ``before-send`` event: for a targeted request it answers with a
synthetic HTTP error response (throttling, 5xx) or raises what urllib3 would have raised (read
timeout, connection refused) instead of sending. botocore then does what it does with a real
failure: parses the error, consults its retry policy (standard mode, the store's 3 attempts),
backs off and sends again. Nothing about the request is asserted; it is only classified to pick
the lifecycle step it belongs to.

A fault may be *applied*: the request is really sent (the write happens on the server) and then
the answer is lost, as when a timeout or a 5xx hides a write that DynamoDB did perform.

`RedisReplyDropper` does the same for Redis: a TCP proxy in front of a real ``redis-server``
that forwards a chosen command, waits for the server's reply (the script ran) and then closes
the client's connection instead of answering, as a failover right after a write does.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.exceptions import EndpointConnectionError, ReadTimeoutError
from botocore.httpsession import URLLib3Session

#: The steps of the lifecycle and the request each one makes.
STEPS = ("claim", "complete", "release", "get")
#: Faults, as a store sees them.
FAULTS = ("throttled", "throttling", "server_error", "read_timeout", "connection_refused")
#: A global table's contention (MRSC): another Region wrote the same item at the same time.
CONFLICT = "replicated_conflict"

_ERROR_BODIES = {
    "throttled": (400, "ProvisionedThroughputExceededException"),
    "throttling": (400, "ThrottlingException"),
    "server_error": (500, "InternalServerError"),
    CONFLICT: (400, "ReplicatedWriteConflictException"),
}


class _Body:
    """The ``raw`` of a synthetic `AWSResponse`: something with ``stream()``."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._data


def step_of(operation: str, body: bytes | None) -> str | None:
    """Tell which lifecycle step a DynamoDB request belongs to (None: not one of ours)."""
    if operation == "GetItem":
        return "get"
    if operation == "DeleteItem":
        return "release"
    if operation == "PutItem" and body:
        status = json.loads(body).get("Item", {}).get("status", {}).get("S")
        return {"IN_PROGRESS": "claim", "INPROGRESS": "claim", "COMPLETED": "complete"}.get(status)
    return None


@dataclass
class _Arming:
    step: str
    fault: str
    times: int | None  # None: every attempt
    applied: bool


class FaultInjector:
    """Inject faults into one botocore ``dynamodb`` client.

    Args:
        client: The client to hook (the store's own, built with the store's retry config).
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self.attempts: Counter[str] = Counter()  # requests made per step, faulted or not
        self.injected: Counter[str] = Counter()
        self._arming: _Arming | None = None
        self._lock = threading.Lock()
        self._http = URLLib3Session()
        client.meta.events.register("before-send.dynamodb", self._before_send)

    def arm(
        self, step: str, fault: str, *, times: int | None = None, applied: bool = False
    ) -> None:
        """Fail the next ``times`` requests of ``step`` (all of them when None) with ``fault``.

        With ``applied`` the first faulted request is really sent before its answer is lost.
        """
        assert step in STEPS
        assert fault in (*FAULTS, CONFLICT)
        with self._lock:
            self._arming = _Arming(step, fault, times, applied)

    def disarm(self) -> None:
        """Stop injecting."""
        with self._lock:
            self._arming = None

    def _before_send(self, request: Any, **_: Any) -> AWSResponse | None:
        operation = request.headers.get("X-Amz-Target", b"")
        if isinstance(operation, bytes):
            operation = operation.decode()
        step = step_of(operation.rpartition(".")[2], request.body)
        if step is None:
            return None
        with self._lock:
            self.attempts[step] += 1
            arming = self._arming
            if arming is None or arming.step != step or arming.times == 0:
                return None
            if arming.times is not None:
                arming.times -= 1
            apply_now = arming.applied
            arming.applied = False  # only the first faulted request reaches the server
            self.injected[step] += 1
        if apply_now:
            self._http.send(request)  # the write happens; its answer is what gets lost
        return self._fail(arming.fault, request)

    def _fail(self, fault: str, request: Any) -> AWSResponse:
        if fault == "read_timeout":
            raise ReadTimeoutError(endpoint_url=request.url)
        if fault == "connection_refused":
            raise EndpointConnectionError(
                endpoint_url=request.url, error=ConnectionRefusedError(111, "Connection refused")
            )
        status, code = _ERROR_BODIES[fault]
        body = json.dumps(
            {"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": "injected"}
        ).encode()
        return AWSResponse(
            request.url,
            status,
            {"Content-Type": "application/x-amz-json-1.0", "x-amzn-RequestId": "injected"},
            _Body(body),
        )


class RedisReplyDropper:
    """A TCP proxy to a ``redis-server`` that loses the replies of chosen commands.

    Args:
        upstream_port: The server's port on 127.0.0.1.

    Point a client at `port`. After `arm`, a command whose bytes contain ``marker`` reaches the
    server, and once the server has replied the client's connection is closed with the reply
    unsent. Everything else passes through unchanged.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.dropped = 0
        self._marker: bytes | None = None
        self._times: int | None = None
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, marker: bytes, *, times: int | None = None) -> None:
        """Lose the reply of the next ``times`` commands holding ``marker`` (None: all).

        ``marker`` is at most 64 bytes: it is looked for across the proxy's reads.
        """
        assert len(marker) <= 64
        with self._lock:
            self._marker, self._times = marker, times

    def disarm(self) -> None:
        """Pass everything through again."""
        with self._lock:
            self._marker = None

    def close(self) -> None:
        """Stop accepting connections."""
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream_port))
            lose_reply = threading.Event()
            for pump, args in (
                (self._requests, (client, server, lose_reply)),
                (self._replies, (server, client, lose_reply)),
            ):
                threading.Thread(target=pump, args=args, daemon=True).start()

    def _take(self, window: bytes) -> bool:
        with self._lock:
            marker = self._marker
            if marker is None or marker not in window or self._times == 0:
                return False
            if self._times is not None:
                self._times -= 1
            self.dropped += 1
            return True

    def _requests(
        self, client: socket.socket, server: socket.socket, lose: threading.Event
    ) -> None:
        tail = b""
        while data := _receive(client):
            window = tail + data
            tail = window[-63:]
            if self._take(window):
                tail = b""
                lose.set()  # before forwarding: the reply cannot overtake the flag
            server.sendall(data)
        _close(server)

    def _replies(self, server: socket.socket, client: socket.socket, lose: threading.Event) -> None:
        while data := _receive(server):
            if lose.is_set():  # the server ran the command and answered: lose the answer
                break
            client.sendall(data)
        _close(client)
        _close(server)


def _receive(connection: socket.socket) -> bytes:
    try:
        return connection.recv(65536)
    except OSError:
        return b""


def _close(connection: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed by the other side
        connection.shutdown(socket.SHUT_RDWR)
    connection.close()
