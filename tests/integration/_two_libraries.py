"""What the mixed-fleet tests share: the function both libraries decorate, and the two fleets.

Each test decorates the same function twice, once with real Powertools (a dev dependency) and
once with this library, both with the same options and nothing else (the literal import swap),
on one DynamoDB table (moto's server) or one redis-server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from idempotent_lambda import IdempotencyAlreadyInProgressError, IdempotencyConfig, idempotent
from idempotent_lambda._clock import SYSTEM_CLOCK, Clock
from idempotent_lambda.persistence.base import PersistenceStore
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.persistence.redis import RedisCachePersistenceLayer
from idempotent_lambda.testing import FakeLambdaContext

pt = pytest.importorskip("aws_lambda_powertools.utilities.idempotency")
from aws_lambda_powertools.utilities.idempotency import exceptions as pt_errors  # noqa: E402
from aws_lambda_powertools.utilities.idempotency.persistence.redis import (  # noqa: E402
    RedisCachePersistenceLayer as PowertoolsRedis,
)

WAIT_S = 30
LEASE_MS = 120_000  # each invocation's time left: no lease passes while a loaded machine stalls
IN_PROGRESS_ERRORS = (
    IdempotencyAlreadyInProgressError,
    pt_errors.IdempotencyAlreadyInProgressError,
)
BACKENDS = ["dynamodb", "redis"]


class Crash(BaseException):
    """Ends an invocation the way a timeout does: Powertools cannot clean up after it."""


class Body:
    """The function both libraries decorate: counts its runs; the first may wait to be let go."""

    def __init__(self) -> None:
        self.calls = 0
        self.crash = False
        self.result: Any = None  # what every run returns instead of its default answer
        self.entered = threading.Event()
        self.go = threading.Event()
        self.go.set()
        counting = threading.Lock()  # racing runs must each count, or a double run could hide

        def handler(event: dict[str, Any], context: Any) -> Any:
            with counting:
                self.calls += 1
                run = self.calls
            self.entered.set()
            if self.crash:
                raise Crash
            if run == 1:
                assert self.go.wait(WAIT_S)
            return {"order": event["id"], "run": run} if self.result is None else self.result

        self.handler = handler  # one function object: both libraries derive the same prefix


@dataclass
class Fleet:
    """Builds each library's store on the shared table or server."""

    backend: str
    powertools_store: Callable[[], Any]
    our_store: Callable[[Clock], PersistenceStore]
    read_raw: Callable[[], list[dict[str, Any]]]  # every record as stored (JSON or item)


def fleet_on(request: pytest.FixtureRequest, backend: str, **options: Any) -> Fleet:
    """Return a fresh DynamoDB table (store ``options`` for both), or an emptied redis-server."""
    if backend == "dynamodb":
        if options:
            make_table = request.getfixturevalue("make_table")
            table = make_table(key_attr=options["key_attr"], sort_key_attr=options["sort_key_attr"])
        else:
            table = request.getfixturevalue("idempotency_table")
        client = request.getfixturevalue("dynamodb_client")
        return Fleet(
            "dynamodb",
            lambda: pt.DynamoDBPersistenceLayer(table, boto3_client=client, **options),
            lambda clock: DynamoDBPersistenceLayer(
                table, boto3_client=client, clock=clock, **options
            ),
            lambda: list(client.scan(TableName=table, ConsistentRead=True)["Items"]),
        )
    port = request.getfixturevalue("redis_port")
    raw = request.getfixturevalue("redis_client")  # empties the database

    def client() -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port)

    def read_raw() -> list[dict[str, Any]]:
        import json

        keys = [key for key in raw.keys("*") if not key.endswith(b":lock")]
        return [json.loads(raw.get(key)) for key in keys]

    return Fleet(
        "redis",
        lambda: PowertoolsRedis(client=client()),
        lambda clock: RedisCachePersistenceLayer(client=client(), clock=clock),
        read_raw,
    )


def both(
    fleet: Fleet, body: Body, *, clock: Clock = SYSTEM_CLOCK, **options: Any
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """Return ``body`` decorated by Powertools and by us, with the same options."""
    theirs = pt.idempotent(
        persistence_store=fleet.powertools_store(), config=pt.IdempotencyConfig(**options)
    )(body.handler)
    ours = idempotent(
        persistence_store=fleet.our_store(clock), config=IdempotencyConfig(**options)
    )(body.handler)
    return theirs, ours


def context(clock: Clock = SYSTEM_CLOCK) -> FakeLambdaContext:
    """Return a Lambda context with `LEASE_MS` left (on ``clock``)."""
    return FakeLambdaContext(timeout_ms=LEASE_MS, clock=clock)


def wall_ms() -> int:
    """Return the wall clock in epoch milliseconds (Powertools reads no other)."""
    return time.time_ns() // 1_000_000


class Race:
    """Two invocations of one call, one per library, started together."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs
        self.start = threading.Barrier(2)
        self.refused: list[BaseException] = []
        self.loser_done = threading.Event()

    def invoke(self, function: Callable[..., Any]) -> None:
        """Call ``function`` once the other thread is ready; a refusal lets the winner finish."""
        self.start.wait(WAIT_S)
        try:
            function(*self.args, **self.kwargs)
        except IN_PROGRESS_ERRORS as exc:
            self.refused.append(exc)
            self.loser_done.set()

    def run(self, *functions: Callable[..., Any]) -> None:
        """Start one thread per function and wait for all of them."""
        threads = [threading.Thread(target=self.invoke, args=(f,)) for f in functions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT_S)
