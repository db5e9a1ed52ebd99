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
    ID,
    PUBLISHED_AT,
    PUBLISHED_RETENTION_SECONDS,
    RETENTION_SECONDS,
    OutboxEvent,
    is_outbox_key,
    item_key,
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

    def outbox_put(self, event: OutboxEvent, record_key: str | None) -> TransactItem:
        """Return the ``Put`` of ``event``'s item, to commit in ``record_key``'s transaction.

        The put is unconditional: a body that runs again after its record expired emits the
        same ids, and its items replace the old ones.
        """
        expires = event.emitted_at_ms // 1000 + RETENTION_SECONDS
        item = {
            **self._schema.key(item_key(record_key, event.event_id)),
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

    def outbox_mark_published(self, key: Mapping[str, Any], published_at_ms: int) -> bool:
        """Record the event at ``key`` as published: a conditional ``UpdateItem``.

        ``key`` is the item's primary key (low-level form), as its stream record or
        `outbox_find` gives it. The TTL is shortened to a day past the stream's retention.

        Returns:
            False when the item was already marked, or is gone (expired or deleted).
        """
        schema = self._schema
        with self._request("UpdateItem") as client:
            try:
                client.update_item(
                    TableName=self.table_name,
                    Key=dict(key),
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

    def outbox_find(self, event_id: str) -> tuple[OutboxEvent, dict[str, Any]] | None:
        """Find one event and its item's primary key (operators: a ``Scan`` or ``Query``).

        Raises:
            IdempotencyCorruptRecordError: The item is not a readable outbox item.
        """
        for item in self._outbox_pages({"#id": ID}, {":id": {"S": event_id}}, "#id = :id", None):
            found = self.outbox_key(item)
            if found is not None:
                return OutboxEvent.from_item(item), found
        return None

    def outbox_scan(
        self, *, unpublished_only: bool = True, limit: int | None = None
    ) -> Iterator[OutboxEvent]:
        """Yield the table's outbox events (operators: ``Scan``, ``Query`` in composite mode).

        Items that are not readable outbox items are left out. ``limit`` stops after the first
        page, of that many items read.
        """
        names = {"#emitted": EMITTED_AT}
        condition = "attribute_exists(#emitted)"
        if unpublished_only:
            names["#published"] = PUBLISHED_AT
            condition += " AND attribute_not_exists(#published)"
        for item in self._outbox_pages(names, {}, condition, limit):
            if self.outbox_key(item) is None:
                continue
            try:
                yield OutboxEvent.from_item(item)
            except IdempotencyCorruptRecordError:
                continue

    def _outbox_pages(
        self,
        names: dict[str, str],
        values: dict[str, Any],
        condition: str,
        limit: int | None,
    ) -> Iterator[Mapping[str, Any]]:
        """Yield the items matching ``condition``: the store's partition in composite mode."""
        schema = self._schema
        request: dict[str, Any] = {"TableName": self.table_name, "FilterExpression": condition}
        if limit is not None:
            request["Limit"] = limit
        if schema.sort_key_attr:
            names = {**names, "#pk": schema.key_attr}
            values = {**values, ":pk": {"S": schema.static_pk_value}}
            request["KeyConditionExpression"] = "#pk = :pk"
        request["ExpressionAttributeNames"] = names
        if values:
            request["ExpressionAttributeValues"] = values
        composite = schema.sort_key_attr is not None
        while True:
            with self._request("Query" if composite else "Scan") as client:
                response = (client.query if composite else client.scan)(**request)
            yield from response.get("Items", [])
            last = response.get("LastEvaluatedKey")
            if not last or limit is not None:
                return
            request["ExclusiveStartKey"] = last
