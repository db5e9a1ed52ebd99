"""Process-wide AWS plumbing: one boto3 session, the idempotency store, the app's tables.

Everything is configured from the environment that ``template.yaml`` sets (and that the local
runner sets from the same template). Clients are built lazily, once per process, so an invocation
that never reaches a table pays nothing for it and warm invocations reuse connections.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config

from idempotent_lambda import DynamoDBPersistenceLayer

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import DynamoDBServiceResource, Table

#: The one session of this process; the local runner hooks its events to count requests.
SESSION = boto3.session.Session()

#: The folder of every function's large results: the bucket's lifecycle rule expires it.
LARGE_RESULTS_ROOT = "idempotency/"

#: The unit of ``IDEMPOTENCY_EXPIRY_DAYS``, and of the large-result bucket's lifecycle rule.
DAY_SECONDS = 24 * 3600

#: Bounded retries and timeouts that fit inside the functions' 10 s timeout.
_CLIENT_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 3}, connect_timeout=2, read_timeout=3
)


def env(name: str) -> str:
    """Return the environment variable ``name``, which the template sets.

    Raises:
        RuntimeError: It is not set (the function is not deployed by template.yaml, or a local
            run did not set it).
    """
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"environment variable {name} is not set; template.yaml sets it")
    return value


def idempotency_store(key_prefix: str) -> DynamoDBPersistenceLayer:
    """Return the store of the function whose keys start with ``key_prefix``.

    Records go to ``IDEMPOTENCY_TABLE``; results too large for an item to
    ``LARGE_RESULTS_BUCKET``, under `large_result_prefix` (the only objects the template lets
    the function read and write). Without the variable, such a result is the documented
    `IdempotencyUnstorableResultError`. Clients are built on first use.
    """
    bucket = os.environ.get("LARGE_RESULTS_BUCKET") or None
    return DynamoDBPersistenceLayer(
        env("IDEMPOTENCY_TABLE"),
        boto3_session=SESSION,
        large_result_bucket=bucket,
        large_result_prefix=None if bucket is None else large_result_prefix(key_prefix),
    )


def outbox_store() -> DynamoDBPersistenceLayer:
    """Return the store whose table holds the outbox items: ``IDEMPOTENCY_TABLE``.

    The publisher reads their events from the table's stream and marks them published here.
    """
    return DynamoDBPersistenceLayer(env("IDEMPOTENCY_TABLE"), boto3_session=SESSION)


@functools.cache
def events_client() -> Any:
    """Return the EventBridge client the publisher puts the outbox's events with."""
    return SESSION.client("events", config=_CLIENT_CONFIG)


def large_result_prefix(key_prefix: str) -> str:
    """Return where the function of ``key_prefix`` offloads: ``idempotency/<key_prefix>/``."""
    return f"{LARGE_RESULTS_ROOT}{key_prefix}/"


def record_expiry_seconds() -> int:
    """Return how long idempotency records live: ``IDEMPOTENCY_EXPIRY_DAYS`` whole days.

    The template sets the variable from its ``IdempotencyExpiryDays`` parameter, which also sets
    after how many days ``LARGE_RESULTS_BUCKET``'s lifecycle rule expires offloaded results, so
    an offloaded result always outlives its record.

    Raises:
        RuntimeError: The variable is not set, or is not a whole number of days >= 1.
    """
    text = env("IDEMPOTENCY_EXPIRY_DAYS")
    try:
        days = int(text)
    except ValueError:
        days = 0
    if days < 1:
        raise RuntimeError(f"IDEMPOTENCY_EXPIRY_DAYS must be a whole number of days, not {text!r}")
    return days * DAY_SECONDS


@functools.cache
def orders_table() -> Table:
    """Return ``ORDERS_TABLE``."""
    return _resource().Table(env("ORDERS_TABLE"))


@functools.cache
def customer_totals_table() -> Table:
    """Return ``CUSTOMER_TOTALS_TABLE``."""
    return _resource().Table(env("CUSTOMER_TOTALS_TABLE"))


@functools.cache
def _resource() -> DynamoDBServiceResource:
    return SESSION.resource("dynamodb", config=_CLIENT_CONFIG)
