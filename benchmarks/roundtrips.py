"""Store round trips per path against a local moto server, ours vs Powertools.

Both libraries get their own table on one ``moto.server.ThreadedMotoServer`` bound to
127.0.0.1, and a boto3 client whose requests are counted with a ``before-send.dynamodb``
handler (every HTTP request, retries included). Paths: first call (new key), replay (same key),
cached replay (``use_local_cache=True``: the first call fills the cache, the replay is counted)
and handler raised (claim, then release).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from benchmarks.cpu import LambdaContext
from benchmarks.events import KEY_EXPRESSION, EventFactory

PATHS = ("first", "replay", "cached", "handler raised")
EXPECTED = {"first": 2, "replay": 1, "cached": 0, "handler raised": 2}
OURS, POWERTOOLS = "ours", "powertools"
_REGION = "us-east-1"


class HandlerFailedError(Exception):
    """Raised by the handler on the ``handler raised`` path."""


@dataclass
class Counter:
    """Counts DynamoDB requests and remembers their operation names."""

    operations: list[str] = field(default_factory=list)

    def __call__(self, event_name: str = "", **_: Any) -> None:
        """``before-send.dynamodb.<Operation>`` handler."""
        self.operations.append(event_name.rsplit(".", 1)[-1])

    @contextmanager
    def counting(self) -> Iterator[list[str]]:
        """Yield a list that receives the operations sent inside the block."""
        start = len(self.operations)
        seen: list[str] = []
        try:
            yield seen
        finally:
            seen.extend(self.operations[start:])


@dataclass
class PathResult:
    """Requests sent on one path by each library."""

    path: str
    operations: dict[str, list[str]] = field(default_factory=dict)

    @property
    def expected(self) -> int:
        """Return the round trips the design requires."""
        return EXPECTED[self.path]

    def passed(self) -> bool:
        """Tell whether ours made exactly the expected number of round trips."""
        return len(self.operations[OURS]) == self.expected


def _client(endpoint: str) -> Any:
    import boto3

    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name=_REGION,
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )


def _create_table(client: Any, name: str) -> None:
    try:
        from idempotent_lambda.testing import create_idempotency_table
    except ImportError:  # older trees: create it directly
        client.create_table(
            TableName=name,
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        return
    create_idempotency_table(client, table_name=name)


def _handler_for(library: str, table: str, client: Any, *, cached: bool) -> Callable[..., Any]:
    def handler(event: Any, context: Any) -> Any:
        if event.get("raise"):
            raise HandlerFailedError
        return {"statusCode": 201, "body": '{"status":"accepted"}'}

    if library == OURS:
        from idempotent_lambda import (
            DynamoDBPersistenceLayer,
            IdempotencyConfig,
            idempotent,
        )

        store = DynamoDBPersistenceLayer(table, boto3_client=client)
        config = IdempotencyConfig(event_key_jmespath=KEY_EXPRESSION, use_local_cache=cached)
        return idempotent(persistence_store=store, config=config)(handler)

    from aws_lambda_powertools.utilities.idempotency import (
        DynamoDBPersistenceLayer as PowertoolsDynamoDBPersistenceLayer,
    )
    from aws_lambda_powertools.utilities.idempotency import (
        IdempotencyConfig as PowertoolsConfig,
    )
    from aws_lambda_powertools.utilities.idempotency import idempotent as pt_idempotent

    pt_store = PowertoolsDynamoDBPersistenceLayer(table, boto3_client=client)
    pt_config = PowertoolsConfig(event_key_jmespath=KEY_EXPRESSION, use_local_cache=cached)
    decorated: Callable[..., Any] = pt_idempotent(persistence_store=pt_store, config=pt_config)(
        handler
    )
    return decorated


def _measure(
    library: str, path: str, *, table: str, client: Any, counter: Counter, factory: EventFactory
) -> list[str]:
    handler = _handler_for(library, table, client, cached=path == "cached")
    context = LambdaContext()
    event = factory.make(f"ord-{uuid.uuid4().hex}")
    if path in ("replay", "cached"):
        handler(event, context)  # the first call, not counted
    if path == "handler raised":
        event["raise"] = True
    with counter.counting() as operations:
        try:
            handler(event, context)
        except HandlerFailedError:
            if path != "handler raised":
                raise
        else:
            if path == "handler raised":
                raise RuntimeError(f"{library}: the handler's exception did not propagate")
    return operations


def run(
    factory: EventFactory, progress: Callable[[str], None] = lambda _: None
) -> list[PathResult]:
    """Start a moto server, run every path for both libraries, stop the server."""
    from moto.server import ThreadedMotoServer

    werkzeug_logger = logging.getLogger("werkzeug")  # moto's server logs every request
    previous_level = werkzeug_logger.level
    werkzeug_logger.setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        client = _client(f"http://{host}:{port}")
        counter = Counter()
        client.meta.events.register("before-send.dynamodb", counter)
        tables = {OURS: "bench-ours", POWERTOOLS: "bench-powertools"}
        for table in tables.values():
            _create_table(client, table)
        results = []
        for path in PATHS:
            result = PathResult(path)
            for library, table in tables.items():
                result.operations[library] = _measure(
                    library, path, table=table, client=client, counter=counter, factory=factory
                )
            progress(
                f"round trips: {path:14} ours {len(result.operations[OURS])} "
                f"powertools {len(result.operations[POWERTOOLS])}"
            )
            results.append(result)
        return results
    finally:
        server.stop()
        werkzeug_logger.setLevel(previous_level)
