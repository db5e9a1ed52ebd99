"""The outbox's items in the idempotency table: written with a record, read and marked published.

`OutboxMethods.outbox_put` is the only one an invocation uses (it builds a write for the
record's transaction, no request). The publisher reads items with one consistent
``BatchGetItem`` per 100 and marks each published with a conditional ``UpdateItem``; operators
list them (``Scan``, or ``Query`` in composite-key mode) and read one (``GetItem``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from idempotent_lambda.exceptions import (
    IdempotencyCorruptRecordError,
    IdempotencyPersistenceLayerError,
)
from idempotent_lambda.outbox._event import (
    EMITTED_AT,
    KEY_PREFIX,
    PUBLISHED_AT,
    PUBLISHED_RETENTION_SECONDS,
    RETENTION_SECONDS,
    OutboxEvent,
    is_outbox_key,
)
from idempotent_lambda.persistence.protocol import TransactItem

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

    from idempotent_lambda.persistence.dynamodb._schema import ItemSchema

#: ``BatchGetItem`` takes at most 100 keys; requests per chunk (first and retries).
_BATCH_GET_LIMIT, _BATCH_GET_ATTEMPTS = 100, 4


class OutboxMethods:
    """The outbox methods of `DynamoDBPersistenceLayer`, which supplies the table and client."""

    if TYPE_CHECKING:
        table_name: str
        _schema: ItemSchema

        def _request(self, operation: str) -> AbstractContextManager[DynamoDBClient]: ...

    def outbox_put(self, event: OutboxEvent) -> TransactItem:
        """Return the ``Put`` of ``event``'s item, to commit in the record's transaction.

        The put is unconditional: a body that runs again after its record expired emits the
        same ids, and its items replace the old ones.
        """
        expires = event.emitted_at_ms // 1000 + RETENTION_SECONDS
        item = {
            **self._schema.key(event.key),
            **event.attributes(),
            self._schema.expiry_attr: {"N": str(expires)},
        }
        return {"Put": {"TableName": self.table_name, "Item": item}}

    def outbox_event_id(self, keys: Mapping[str, Any]) -> str | None:
        """Return the event id of the item with primary key ``keys`` (plain values), or None."""
        key = keys.get(self._schema.idempotency_key_attr)
        if not is_outbox_key(key):
            return None
        if self._schema.sort_key_attr and keys.get(self._schema.key_attr) != (
            self._schema.static_pk_value
        ):
            return None
        return str(key)[len(KEY_PREFIX) :]

    def outbox_items(self, event_ids: Sequence[str]) -> dict[str, Mapping[str, Any]]:
        """Read the items of ``event_ids`` as they are now (consistent ``BatchGetItem``s).

        Returns:
            The items found (low-level form), by event id; an id with no item is left out.

        Raises:
            IdempotencyPersistenceLayerError: A read failed, or keys stayed unprocessed.
        """
        found: dict[str, Mapping[str, Any]] = {}
        unique = list(dict.fromkeys(event_ids))
        attr = self._schema.idempotency_key_attr
        for start in range(0, len(unique), _BATCH_GET_LIMIT):
            chunk = unique[start : start + _BATCH_GET_LIMIT]
            keys = [self._schema.key(KEY_PREFIX + event_id) for event_id in chunk]
            pending: Any = {self.table_name: {"Keys": keys, "ConsistentRead": True}}
            for attempt in range(_BATCH_GET_ATTEMPTS):
                if attempt:
                    time.sleep(min(0.05 * 2 ** (attempt - 1), 0.5))
                with self._request("BatchGetItem") as client:
                    response = client.batch_get_item(RequestItems=pending)
                for item in response.get("Responses", {}).get(self.table_name, ()):
                    key = str(item[attr]["S"])
                    found[key[len(KEY_PREFIX) :]] = item
                pending = response.get("UnprocessedKeys") or {}
                if not pending.get(self.table_name, {}).get("Keys"):
                    break
            else:
                raise IdempotencyPersistenceLayerError(
                    "DynamoDB left outbox keys unprocessed after retries (throttled)"
                )
        return found

    def outbox_mark_published(self, event_id: str, published_at_ms: int) -> bool:
        """Record ``event_id`` as published: one ``UpdateItem``, conditional on it not being so.

        The item's TTL is shortened to a day past the stream's retention.

        Returns:
            False when the item was already marked, or is gone (expired or deleted).
        """
        schema = self._schema
        with self._request("UpdateItem") as client:
            try:
                client.update_item(
                    TableName=self.table_name,
                    Key=schema.key(KEY_PREFIX + event_id),
                    UpdateExpression="SET #published = :at, #expiry = :expiry",
                    ConditionExpression=(
                        "attribute_exists(#key) AND attribute_not_exists(#published)"
                    ),
                    ExpressionAttributeNames={
                        "#published": PUBLISHED_AT,
                        "#expiry": schema.expiry_attr,
                        "#key": schema.idempotency_key_attr,
                    },
                    ExpressionAttributeValues={
                        ":at": {"N": str(published_at_ms)},
                        ":expiry": {
                            "N": str(published_at_ms // 1000 + PUBLISHED_RETENTION_SECONDS)
                        },
                    },
                )
            except client.exceptions.ConditionalCheckFailedException:
                return False
        return True

    def outbox_event(self, event_id: str) -> OutboxEvent | None:
        """Read one event (consistent ``GetItem``); None when it has no item.

        Raises:
            IdempotencyCorruptRecordError: The item is not a readable outbox item.
        """
        with self._request("GetItem") as client:
            response = client.get_item(
                TableName=self.table_name,
                Key=self._schema.key(KEY_PREFIX + event_id),
                ConsistentRead=True,
            )
        item = response.get("Item")
        return None if item is None else OutboxEvent.from_item(item)

    def outbox_scan(self, *, unpublished_only: bool = True) -> Iterator[OutboxEvent]:
        """Yield the table's outbox events (operators: ``Scan``, ``Query`` in composite mode).

        Items that are not readable outbox items are left out.
        """
        schema = self._schema
        names = {"#key": schema.idempotency_key_attr}
        values: dict[str, Any] = {":prefix": {"S": KEY_PREFIX}}
        request: dict[str, Any] = {"TableName": self.table_name}
        filters = []
        if schema.sort_key_attr:
            names["#pk"] = schema.key_attr
            values[":pk"] = {"S": schema.static_pk_value}
            request["KeyConditionExpression"] = "#pk = :pk AND begins_with(#key, :prefix)"
        else:
            filters.append("begins_with(#key, :prefix)")
        filters.append("attribute_exists(#emitted)")
        names["#emitted"] = EMITTED_AT
        if unpublished_only:
            filters.append("attribute_not_exists(#published)")
            names["#published"] = PUBLISHED_AT
        request["FilterExpression"] = " AND ".join(filters)
        request["ExpressionAttributeNames"] = names
        request["ExpressionAttributeValues"] = values
        composite = schema.sort_key_attr is not None
        while True:
            with self._request("Query" if composite else "Scan") as client:
                response = (client.query if composite else client.scan)(**request)
            for item in response.get("Items", []):
                try:
                    yield OutboxEvent.from_item(item)
                except IdempotencyCorruptRecordError:
                    continue
            last = response.get("LastEvaluatedKey")
            if not last:
                return
            request["ExclusiveStartKey"] = last
