"""``BatchGetItem`` behind `DynamoDBPersistenceLayer.get_many`: a batch's keys in few requests.

A batch adapter reads every key of a batch before claiming any (see docs/batches.md). This
module chunks the keys to DynamoDB's per-request limit, asks again for the keys DynamoDB leaves
unprocessed, and decodes the items; the store sends each request through its one error boundary.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from idempotent_lambda.persistence._dynamodb_item import CorruptItemError, ItemSchema
from idempotent_lambda.record import IdempotencyRecord

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

    #: The store's translation boundary: yields the client, maps botocore errors.
    Request = Callable[[str], AbstractContextManager[DynamoDBClient]]

#: ``BatchGetItem`` takes at most 100 keys per request.
BATCH_GET_LIMIT = 100
#: Requests for one chunk (the first and the retries of unprocessed keys), and the first backoff.
BATCH_GET_ATTEMPTS, BATCH_GET_BACKOFF_S = 4, 0.05


def read_many(
    request: Request,
    table_name: str,
    schema: ItemSchema,
    idempotency_keys: Sequence[str],
    resolve: Callable[[IdempotencyRecord], IdempotencyRecord],
) -> dict[str, IdempotencyRecord]:
    """Read the records of ``idempotency_keys`` with strongly consistent ``BatchGetItem``.

    One request per 100 keys. Keys still unprocessed after the retries are left out, as are items
    that do not follow the record format, so the caller's per-key path meets them instead.
    ``resolve`` turns a record read into the one to return (it fetches results offloaded to S3).
    """
    unique = list(dict.fromkeys(idempotency_keys))
    found: dict[str, IdempotencyRecord] = {}
    for start in range(0, len(unique), BATCH_GET_LIMIT):
        chunk = unique[start : start + BATCH_GET_LIMIT]
        for item in _batch_get(request, table_name, [schema.key(key) for key in chunk]):
            try:
                record = resolve(schema.from_item(item))
            except CorruptItemError:
                continue
            found[record.idempotency_key] = record
    return found


def _batch_get(request: Request, table_name: str, keys: list[Any]) -> list[Mapping[str, Any]]:
    """Return the items of ``keys`` (at most 100), retrying unprocessed keys a few times."""
    items: list[Mapping[str, Any]] = []
    pending: Any = {table_name: {"Keys": keys, "ConsistentRead": True}}
    for attempt in range(BATCH_GET_ATTEMPTS):
        if attempt:
            time.sleep(min(BATCH_GET_BACKOFF_S * 2 ** (attempt - 1), 0.5))
        with request("BatchGetItem") as client:
            response = client.batch_get_item(RequestItems=pending)
        items.extend(response.get("Responses", {}).get(table_name, ()))
        pending = response.get("UnprocessedKeys") or {}
        if not pending.get(table_name, {}).get("Keys"):
            break
    return items
