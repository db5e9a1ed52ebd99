"""Process-wide AWS plumbing: one boto3 session, the idempotency store, the app's tables.

Everything is configured from the environment that ``template.yaml`` sets (and that the local
runner sets from the same template). Clients are built lazily, once per process, so an invocation
that never reaches a table pays nothing for it and warm invocations reuse connections.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config

from idempotent_lambda import DynamoDBPersistenceLayer

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import DynamoDBServiceResource, Table

#: The one session of this process; the local runner hooks its events to count requests.
SESSION = boto3.session.Session()

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


def idempotency_store() -> DynamoDBPersistenceLayer:
    """Return a store on ``IDEMPOTENCY_TABLE``; it builds its client on first use."""
    return DynamoDBPersistenceLayer(env("IDEMPOTENCY_TABLE"), boto3_session=SESSION)


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
