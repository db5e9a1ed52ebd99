"""The outbox's items in the idempotency table: written with a record, read and marked published.

`OutboxMethods.outbox_put` is the only one an invocation uses (it builds a write for the
record's transaction, no request). The publisher reads items with one consistent
``BatchGetItem`` per 100 and marks each published with a conditional ``UpdateItem``; operators
list them (``Scan``, or ``Query`` in composite-key mode) and read one (``GetItem``).
"""

from __future__ import annotations

import json
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

    def outbox_key(self, keys: Mapping[str, Any]) -> dict[str, Any] | None:
        """Return the primary key in ``keys`` (low-level form) if it is an outbox item's.

        ``keys`` is a stream record's ``Keys``, or a whole item.
        The partition value is taken as it is: in composite-key mode each function writes
        under its own (``static_pk_value``), and one publisher serves them all.
        """
        schema = self._schema
        value = keys.get(schema.idempotency_key_attr)
        if not isinstance(value, Mapping) or not is_outbox_key(value.get("S")):
            return None
        names = [schema.key_attr, *([schema.sort_key_attr] if schema.sort_key_attr else [])]
        if not all(isinstance(keys.get(name), Mapping) for name in names):
            return None
        return {name: dict(keys[name]) for name in names}

    def outbox_items(self, keys: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """Read the outbox items at ``keys`` as they are now (consistent ``BatchGetItem``s).

        Returns:
            The items found (low-level form); a key with no item is left out.

        Raises:
            IdempotencyPersistenceLayerError: A read failed, or keys stayed unprocessed.
        """
        unique = list({json.dumps(key, sort_keys=True): key for key in keys}.values())
        found: list[Mapping[str, Any]] = []
        for start in range(0, len(unique), _BATCH_GET_LIMIT):
            chunk = unique[start : start + _BATCH_GET_LIMIT]
            pending: Any = {self.table_name: {"Keys": chunk, "ConsistentRead": True}}
            for attempt in range(_BATCH_GET_ATTEMPTS):
                if attempt:
                    time.sleep(min(0.05 * 2 ** (attempt - 1), 0.5))
                with self._request("BatchGetItem") as client:
                    response = client.batch_get_item(RequestItems=pending)
                found.extend(response.get("Responses", {}).get(self.table_name, ()))
                pending = response.get("UnprocessedKeys") or {}
                if not pending.get(self.table_name, {}).get("Keys"):
                    break
            else:
                raise IdempotencyPersistenceLayerError(
                    "DynamoDB left outbox keys unprocessed after retries (throttled)"
                )
        return found

    def outbox_mark_published(
        self, event_id: str, published_at_ms: int, *, key: Mapping[str, Any] | None = None
    ) -> bool:
        """Record ``event_id`` as published: one ``UpdateItem``, conditional on it not being so.

        ``key`` is the item's primary key when it is not this store's (a stream record's, in
        composite-key mode). The item's TTL is shortened to a day past the stream's retention.

        Returns:
            False when the item was already marked, or is gone (expired or deleted).
        """
        schema = self._schema
        with self._request("UpdateItem") as client:
            try:
                client.update_item(
                    TableName=self.table_name,
                    Key=dict(key) if key is not None else schema.key(KEY_PREFIX + event_id),
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

    def outbox_scan(
        self, *, unpublished_only: bool = True, limit: int | None = None
    ) -> Iterator[OutboxEvent]:
        """Yield the table's outbox events (operators: ``Scan``, ``Query`` in composite mode).

        Items that are not readable outbox items are left out. ``limit`` stops after the first
        page, of that many items read.
        """
        schema = self._schema
        names = {"#key": schema.idempotency_key_attr}
        values: dict[str, Any] = {":prefix": {"S": KEY_PREFIX}}
        request: dict[str, Any] = {"TableName": self.table_name}
        if limit is not None:
            request["Limit"] = limit
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
            if not last or limit is not None:
                return
            request["ExclusiveStartKey"] = last
