"""The outbox's items in the idempotency table: written with a record, read and marked published.

`OutboxMethods.outbox_item_key` and `OutboxMethods.outbox_put` are the only ones an invocation
uses (they build a write for the record's transaction, no request). The publisher reads events
with one consistent ``BatchGetItem`` per 100 (one key at a time when a batch is refused, so a
denied or broken item fails alone) and marks each published with a conditional ``UpdateItem``;
the sweeper reads the sparse index of unpublished items (`outbox_pending_keys`); operators list
them (``Scan``, or ``Query`` in composite-key mode) and read one.

About 400 lines: the item's mapping to an event (`event_item`, `read_event`) is here, with every
request that reads or writes an outbox item, so that nothing above the store sees an item.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from idempotent_lambda._outbox_format import (
    BUS,
    DETAIL,
    DETAIL_KEY,
    DETAIL_TYPE,
    EMITTED_AT,
    ID,
    LATEST_EMIT_MS,
    PENDING,
    PENDING_SHARDS,
    PUBLISHED_AT,
    PUBLISHED_RETENTION_SECONDS,
    RETENTION_SECONDS,
    SOURCE,
    TRACE_PARENT,
    OutboxEvent,
    event_id,
    is_outbox_key,
    item_key,
    key_ident,
    pending_value,
    trace_parent_or_none,
)
from idempotent_lambda.exceptions import (
    IdempotencyCorruptRecordError,
    IdempotencyError,
    IdempotencyPersistenceLayerError,
)
from idempotent_lambda.persistence.protocol import TransactItem

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

    from idempotent_lambda.persistence.dynamodb._schema import ItemSchema

#: ``BatchGetItem`` takes at most 100 keys; requests per chunk (first and retries).
_BATCH_GET_LIMIT, _BATCH_GET_ATTEMPTS = 100, 4


def event_item(event: OutboxEvent) -> dict[str, Any]:
    """Return the attributes (low-level form) of ``event``'s item, without the key and the TTL."""
    item: dict[str, Any] = {
        ID: {"S": event.event_id},
        DETAIL_TYPE: {"S": event.detail_type},
        DETAIL: {"S": event.detail},
        SOURCE: {"S": event.source},
        EMITTED_AT: {"N": str(event.emitted_at_ms)},
    }
    if event.event_bus_name is not None:
        item[BUS] = {"S": event.event_bus_name}
    if event.published_at_ms is not None:
        item[PUBLISHED_AT] = {"N": str(event.published_at_ms)}
    if event.trace_parent is not None:
        item[TRACE_PARENT] = {"S": event.trace_parent}
    return item


def read_event(item: Mapping[str, Any], key: Mapping[str, Any]) -> OutboxEvent:
    """Read an outbox item (low-level form) stored at ``key``, its primary key.

    The event's id is `event_id` of ``key``; an item whose ``outbox_id`` says otherwise is not
    this event. A stored ``traceparent`` that is not W3C's is dropped, and so is an ``outbox``
    field of the detail (the publisher puts the id there). The detail is parsed here, once.

    Raises:
        IdempotencyCorruptRecordError: An attribute is missing, of the wrong type or out of
            range, the detail is not a JSON object (or nested too deep to read), or the item's
            ``outbox_id`` is not its key's (the message names the attribute, never its content).
    """

    def text(name: str, *, required: bool = True) -> str | None:
        value = item.get(name)
        if value is None and not required:
            return None
        if not isinstance(value, Mapping) or not isinstance(value.get("S"), str):
            raise IdempotencyCorruptRecordError(f"outbox item without a string '{name}'")
        return str(value["S"])

    def number(name: str, *, required: bool = True) -> int | None:
        value = item.get(name)
        if value is None and not required:
            return None
        try:
            return int(value["N"])  # type: ignore[index]
        except (TypeError, KeyError, ValueError) as exc:
            raise IdempotencyCorruptRecordError(f"outbox item without an integer '{name}'") from exc

    identity = event_id(key)
    if text(ID) != identity:
        raise IdempotencyCorruptRecordError(f"outbox item whose '{ID}' is not its key's")
    emitted_at = int(number(EMITTED_AT) or 0)
    if not 0 <= emitted_at <= LATEST_EMIT_MS:
        raise IdempotencyCorruptRecordError(f"outbox item whose '{EMITTED_AT}' is out of range")
    detail = str(text(DETAIL))
    try:
        parsed = json.loads(detail)
    except (ValueError, RecursionError):
        parsed = None
    if not isinstance(parsed, dict):
        raise IdempotencyCorruptRecordError(f"outbox item whose '{DETAIL}' is not a JSON object")
    if DETAIL_KEY in parsed:  # not written by emit: the id goes there, and only the id
        del parsed[DETAIL_KEY]
        detail = json.dumps(parsed, separators=(",", ":"), ensure_ascii=False)
    return OutboxEvent(
        event_id=identity,
        detail_type=str(text(DETAIL_TYPE)),
        detail=detail,
        source=str(text(SOURCE)),
        event_bus_name=text(BUS, required=False),
        emitted_at_ms=emitted_at,
        published_at_ms=number(PUBLISHED_AT, required=False),
        trace_parent=trace_parent_or_none(text(TRACE_PARENT, required=False)),
    )


class OutboxMethods:
    """The outbox methods of `DynamoDBPersistenceLayer`, which supplies the table and client."""

    if TYPE_CHECKING:
        table_name: str
        _schema: ItemSchema

        def _request(self, operation: str) -> AbstractContextManager[DynamoDBClient]: ...

    def outbox_item_key(self, owner_key: str | None, slot: str) -> dict[str, Any]:
        """Return the primary key (low-level form) of the event item at ``slot`` of ``owner_key``.

        ``owner_key`` is the record's key, or the function's key prefix for a body run without
        a record.
        """
        return dict(self._schema.key(item_key(owner_key, slot)))

    def outbox_put(
        self, event: OutboxEvent, key: Mapping[str, Any], key_prefix: str | None
    ) -> TransactItem:
        """Return the ``Put`` of ``event``'s item at ``key``, to commit in its body's transaction.

        The put is conditional on no item being there: an item, published or not, is never
        overwritten (a body run under a new claim writes new items). The item carries
        ``outbox_pending`` (the index of unpublished items) under ``key_prefix``'s partitions,
        or ``static_pk_value``'s in composite-key mode.
        """
        schema = self._schema
        expires = event.emitted_at_ms // 1000 + RETENTION_SECONDS
        unit = schema.static_pk_value if schema.sort_key_attr else (key_prefix or "outbox")
        item = {
            **key,
            **event_item(event),
            PENDING: {"S": pending_value(unit, event.event_id)},
            schema.expiry_attr: {"N": str(expires)},
        }
        return {
            "Put": {
                "TableName": self.table_name,
                "Item": item,
                "ConditionExpression": "attribute_not_exists(#key)",
                "ExpressionAttributeNames": {"#key": schema.idempotency_key_attr},
            }
        }

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

    def outbox_partition(self, key: Mapping[str, Any]) -> str:
        """Return the partition value of an outbox item's ``key`` (what IAM's LeadingKeys reads)."""
        return str(key[self._schema.key_attr]["S"])

    def outbox_items(
        self, keys: Sequence[Mapping[str, Any]]
    ) -> tuple[dict[str, OutboxEvent], dict[str, IdempotencyError]]:
        """Read the outbox events at ``keys`` as they are now (consistent ``BatchGetItem``s).

        A request DynamoDB refuses (IAM denies one of its keys, say: ``BatchGetItem`` is
        authorised for all its keys or none) is read again one key a request, so each key that
        cannot be read fails alone.

        Returns:
            The events found, by `key_ident` of their keys (a key with no item is left out),
            and the error of each key that could not be read (`IdempotencyPersistenceLayerError`)
            or read as an event (`IdempotencyCorruptRecordError`), by `key_ident`.
        """
        unique = list({key_ident(key): key for key in keys}.values())
        parts = [unique[n : n + _BATCH_GET_LIMIT] for n in range(0, len(unique), _BATCH_GET_LIMIT)]
        found: list[Mapping[str, Any]] = []
        failed: dict[str, IdempotencyError] = {}
        while parts:
            part = parts.pop(0)
            got: list[Mapping[str, Any]] = []
            pending: Any = {self.table_name: {"Keys": part, "ConsistentRead": True}}
            try:
                for attempt in range(_BATCH_GET_ATTEMPTS):
                    if attempt:
                        time.sleep(min(0.05 * 2 ** (attempt - 1), 0.5))
                    with self._request("BatchGetItem") as client:
                        response = client.batch_get_item(RequestItems=pending)
                    got.extend(response.get("Responses", {}).get(self.table_name, ()))
                    pending = response.get("UnprocessedKeys") or {}
                    if not pending.get(self.table_name, {}).get("Keys"):
                        break
                else:
                    throttled = IdempotencyPersistenceLayerError(
                        "DynamoDB left outbox keys unprocessed after retries (throttled)"
                    )
                    failed.update((key_ident(key), throttled) for key in part)  # no split
                    continue
            except IdempotencyPersistenceLayerError as exc:
                if len(part) > 1:  # refused whole: read each key alone to find those to blame
                    parts[:0] = [[key] for key in part]
                else:
                    failed[key_ident(part[0])] = exc
                continue
            found.extend(got)
        events: dict[str, OutboxEvent] = {}
        for item in found:
            key = self.outbox_key(item)
            if key is None:
                continue
            try:
                events[key_ident(key)] = read_event(item, key)
            except IdempotencyCorruptRecordError as exc:
                failed[key_ident(key)] = exc
        return events, failed

    def outbox_mark_published(self, key: Mapping[str, Any], published_at_ms: int) -> bool:
        """Record the event at ``key`` as published: a conditional ``UpdateItem``.

        ``key`` is the item's primary key (low-level form), as its stream record or
        `outbox_find` gives it. The TTL is shortened to a day past the stream's retention, and
        ``outbox_pending`` is removed: the item leaves the index of unpublished items.

        Returns:
            False when the item was already marked, or is gone (expired or deleted).
        """
        schema = self._schema
        with self._request("UpdateItem") as client:
            try:
                client.update_item(
                    TableName=self.table_name,
                    Key=dict(key),
                    UpdateExpression="SET #published = :at, #expiry = :expiry REMOVE #pending",
                    ConditionExpression=(
                        "attribute_exists(#key) AND attribute_not_exists(#published)"
                    ),
                    ExpressionAttributeNames={
                        "#published": PUBLISHED_AT,
                        "#expiry": schema.expiry_attr,
                        "#key": schema.idempotency_key_attr,
                        "#pending": PENDING,
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
                event = read_event(item, found)  # its id is its key's, or it fails
                return event, found
        return None

    def outbox_probe(self) -> bool:
        """Tell whether a first page of the table (1,000 items) holds an outbox item (doctor)."""
        pages = self._outbox_pages({"#id": ID}, {}, "attribute_exists(#id)", 1000)
        return any(self.outbox_key(item) is not None for item in pages)

    def outbox_scan(
        self,
        *,
        unpublished_only: bool = True,
        limit: int | None = None,
        unreadable: list[dict[str, Any]] | None = None,
    ) -> Iterator[tuple[OutboxEvent, dict[str, Any]]]:
        """Yield the table's outbox events and their items' keys (operators: ``Scan``, or
        ``Query`` in composite mode).

        Items that are not readable outbox items are left out (their keys are added to
        ``unreadable`` when it is given). ``limit`` stops after the first page, of that many
        items read.
        """
        names = {"#emitted": EMITTED_AT}
        condition = "attribute_exists(#emitted)"
        if unpublished_only:
            names["#published"] = PUBLISHED_AT
            condition += " AND attribute_not_exists(#published)"
        for item in self._outbox_pages(names, {}, condition, limit):
            key = self.outbox_key(item)
            if key is None:
                continue
            try:
                event = read_event(item, key)
            except IdempotencyCorruptRecordError:
                if unreadable is not None:
                    unreadable.append(key)
                continue
            yield event, key

    def outbox_pending_keys(
        self, index_name: str, key_prefixes: Sequence[str] | None, limit: int
    ) -> list[tuple[dict[str, Any], int]]:
        """Return unpublished items' keys and emit times from the sparse index, oldest first.

        One ``Query`` of at most ``limit`` entries per index partition of each prefix
        (`PENDING_SHARDS` per prefix); one ``Scan`` of the index, of at most ``limit``
        entries, when ``key_prefixes`` is None. The table itself is never scanned.
        """
        schema = self._schema
        names = [schema.key_attr, *([schema.sort_key_attr] if schema.sort_key_attr else [])]
        pages: list[Iterable[Mapping[str, Any]]] = []
        with self._request("Query" if key_prefixes is not None else "Scan") as client:
            if key_prefixes is None:
                pages.append(
                    client.scan(TableName=self.table_name, IndexName=index_name, Limit=limit).get(
                        "Items", []
                    )
                )
            for prefix in key_prefixes or ():
                for shard in range(PENDING_SHARDS):
                    pages.append(
                        client.query(
                            TableName=self.table_name,
                            IndexName=index_name,
                            KeyConditionExpression="#pending = :pending",
                            ExpressionAttributeNames={"#pending": PENDING},
                            ExpressionAttributeValues={":pending": {"S": f"{prefix}#{shard}"}},
                            Limit=limit,
                        ).get("Items", [])
                    )
        found: list[tuple[dict[str, Any], int]] = []
        for item in (item for page in pages for item in page):
            key = self.outbox_key(item)
            try:
                emitted = int(item[EMITTED_AT]["N"])
            except (KeyError, TypeError, ValueError):
                continue
            if key is not None and all(name in key for name in names):
                found.append((key, emitted))
        return sorted(found, key=lambda pair: pair[1])

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
