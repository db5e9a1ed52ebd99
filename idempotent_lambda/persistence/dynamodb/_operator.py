"""What an operator does to an idempotency table: read, delete and release records; create it.

They serve `idempotent_lambda.cli`, tests and local runs, never an invocation's path (the
functions are not granted ``Scan``, ``Query`` or ``CreateTable``). They read and handle records
of both formats, whatever format the store itself writes: one table may hold both while a fleet
migrates, and the formats differ here only in how IN_PROGRESS is spelled.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from idempotent_lambda._outbox_format import EMITTED_AT, OUTBOX_INDEX, PENDING
from idempotent_lambda._record_format import RecordFormatName
from idempotent_lambda.exceptions import IdempotencyCorruptRecordError
from idempotent_lambda.persistence._aws import error_details
from idempotent_lambda.persistence.dynamodb._record_view import RecordView
from idempotent_lambda.persistence.protocol import POWERTOOLS_IN_PROGRESS
from idempotent_lambda.record import IdempotencyRecord, Status

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import AttributeDefinitionTypeDef, KeySchemaElementTypeDef

    from idempotent_lambda.persistence.dynamodb._schema import ItemSchema, ReadItem

logger = logging.getLogger(__name__)

#: IN_PROGRESS as each format stores it: this library's native format, then Powertools'.
IN_PROGRESS_SPELLINGS = (Status.IN_PROGRESS.value, POWERTOOLS_IN_PROGRESS)
#: The condition "the item is IN_PROGRESS, in either spelling" and its values.
_IS_IN_PROGRESS = "#status IN (:in_progress, :in_progress_powertools)"
_IN_PROGRESS_VALUES = {
    ":in_progress": {"S": IN_PROGRESS_SPELLINGS[0]},
    ":in_progress_powertools": {"S": IN_PROGRESS_SPELLINGS[1]},
}


@dataclass(frozen=True, slots=True)
class ScanPage:
    """One page of a table read.

    Attributes:
        records: The records on the page whose key matched.
        scanned: Items the page read (DynamoDB's ``ScannedCount``).
        skipped: Items on the page that are not idempotency records.
        outbox: How many of the skipped items are outbox events (`idempotent_lambda.outbox`).
    """

    records: tuple[IdempotencyRecord, ...]
    scanned: int
    skipped: int
    outbox: int = 0


@dataclass(frozen=True, slots=True)
class DeleteOutcome:
    """What a conditional delete did.

    Attributes:
        deleted: True when the record was deleted.
        record: The deleted record; or, when ``deleted`` is False, the record that was kept
            (a live IN_PROGRESS claim), None when there was no record.
    """

    deleted: bool
    record: IdempotencyRecord | None


class OperatorMethods:
    """The operator methods of `DynamoDBPersistenceLayer`, which supplies the table and client."""

    if TYPE_CHECKING:
        table_name: str
        _schema: ItemSchema

        def _request(self, operation: str) -> AbstractContextManager[DynamoDBClient]: ...

        def _get_item(self, idempotency_key: str) -> ReadItem | None: ...

        def outbox_key(self, keys: Mapping[str, Any]) -> dict[str, Any] | None: ...

    def scan(
        self, *, prefix: str | None = None, page_size: int | None = None
    ) -> Iterator[ScanPage]:
        """Read the records whose key starts with ``prefix``, page by page, without results.

        A simple-key table is scanned; in composite-key mode only the store's partition is
        queried. Items that are not records are counted per page (``skipped``), not returned.
        """
        arguments = self._scan_arguments(prefix, page_size)
        composite = self._schema.sort_key_attr is not None
        while True:
            with self._request("Query" if composite else "Scan") as client:
                response = (client.query if composite else client.scan)(**arguments)
            items = response.get("Items", [])
            records, outbox = [], 0
            for item in items:
                try:
                    records.append(self._from_any_item(item))
                except IdempotencyCorruptRecordError:
                    outbox += self.outbox_key(item) is not None
            skipped = len(items) - len(records)
            scanned = response.get("ScannedCount", len(items))
            yield ScanPage(tuple(records), scanned, skipped, outbox)
            last = response.get("LastEvaluatedKey")
            if not last:
                return
            arguments["ExclusiveStartKey"] = last

    def inspect(self, idempotency_key: str) -> IdempotencyRecord | None:
        """Read the record of ``idempotency_key`` in either format (one consistent ``GetItem``).

        Unlike `get`, a result offloaded to S3 stays its reference: it is not fetched.

        Raises:
            IdempotencyCorruptRecordError: The item is not a record (see `ItemSchema.from_item`).
        """
        item = self._get_item(idempotency_key)
        return None if item is None else self._from_any_item(item)

    def read(self, idempotency_key: str, record_format: RecordFormatName) -> RecordView | None:
        """Read the record of ``idempotency_key`` (as `inspect`) and decode it for display.

        Args:
            idempotency_key: The full key.
            record_format: The format the functions that wrote it use (their config's).
        """
        record = self.inspect(idempotency_key)
        return None if record is None else RecordView.of(record, record_format)

    def delete(self, idempotency_key: str, *, live_cutoff_ms: int | None = None) -> DeleteOutcome:
        """Delete the record of ``idempotency_key``, whatever its owner, so the key runs again.

        Args:
            idempotency_key: The full key.
            live_cutoff_ms: Keep an IN_PROGRESS record whose lease (or, without one, whose
                expiration) ends at or after this: it may still be running. None: delete it.

        Returns:
            Whether it was deleted, and the deleted record or the one kept (None: no record).
            An offloaded result stays a reference; its S3 object is left to the lifecycle rule.
        """
        schema = self._schema
        with self._request("DeleteItem") as client:
            try:
                response = client.delete_item(
                    TableName=self.table_name,
                    Key=schema.key(idempotency_key),
                    ReturnValues="ALL_OLD",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                    **self._delete_condition(live_cutoff_ms),
                )
            except client.exceptions.ConditionalCheckFailedException as exc:
                kept = cast("Mapping[str, Any]", exc.response).get("Item")
                if kept is not None:
                    return DeleteOutcome(False, self._from_any_item(kept))
            else:
                return DeleteOutcome(True, self._from_any_item(response.get("Attributes", {})))
        # The endpoint did not send the kept item back: read it.
        return DeleteOutcome(False, self.inspect(idempotency_key))

    def release_if_stuck(self, seen: IdempotencyRecord, *, cutoff_ms: int) -> bool:
        """Delete ``seen`` if it is still the same IN_PROGRESS claim, with a lease that ended.

        Fenced on ``seen``'s owner (a Powertools claim has none) and on its lease ending before
        ``cutoff_ms`` (without a lease end: its expiration), so an owner that claimed the key
        since ``seen`` was read is never touched. The status may be either spelling: a claim
        that changes the item changes its owner or its lease too.

        Returns:
            False when the record changed since it was read, or its lease is live.
        """
        schema = self._schema
        names = {
            "#status": schema.status_attr,
            "#owner": schema.owner_attr,
            "#lease": schema.in_progress_expiry_attr,
        }
        values: dict[str, Any] = dict(_IN_PROGRESS_VALUES)
        owner = "attribute_not_exists(#owner)"
        if seen.owner is not None:
            owner = "#owner = :owner"
            values[":owner"] = {"S": seen.owner}
        if seen.in_progress_expiry_timestamp is not None:
            values[":cutoff_ms"] = {"N": str(cutoff_ms)}
            lease = "#lease < :cutoff_ms"
        else:
            names["#expiry"] = schema.expiry_attr
            values[":cutoff_s"] = {"N": str(cutoff_ms // 1000)}
            lease = "attribute_not_exists(#lease) AND #expiry < :cutoff_s"
        with self._request("DeleteItem") as client:
            try:
                client.delete_item(
                    TableName=self.table_name,
                    Key=schema.key(seen.idempotency_key),
                    ConditionExpression=f"{_IS_IN_PROGRESS} AND {owner} AND {lease}",
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values,
                )
            except client.exceptions.ConditionalCheckFailedException:
                return False
        return True

    def _from_any_item(self, item: ReadItem) -> IdempotencyRecord:
        """Return the record an item of either format holds (see `ItemSchema.from_item`)."""
        schema = self._schema
        stored = (item.get(schema.status_attr) or {}).get("S")
        if stored in IN_PROGRESS_SPELLINGS and stored != schema.in_progress_value:
            schema = replace(schema, in_progress_value=stored)
        return schema.from_item(item)

    def _scan_arguments(self, prefix: str | None, page_size: int | None) -> dict[str, Any]:
        """Return the first ``Scan`` (simple key) or ``Query`` (composite key) of a read."""
        schema = self._schema
        attributes = [
            schema.key_attr,
            *([schema.sort_key_attr] if schema.sort_key_attr else []),
            schema.status_attr,
            schema.expiry_attr,
            schema.in_progress_expiry_attr,
            schema.validation_key_attr,
            schema.owner_attr,
        ]
        names = {f"#a{i}": name for i, name in enumerate(attributes)}
        values: dict[str, Any] = {}
        request: dict[str, Any] = {"TableName": self.table_name}
        request["ProjectionExpression"] = ", ".join(names)
        if page_size:
            request["Limit"] = page_size
        prefix_condition = "begins_with(#key, :prefix)"
        if prefix:
            names["#key"] = schema.idempotency_key_attr
            values[":prefix"] = {"S": prefix}
        if schema.sort_key_attr:
            names["#pk"] = schema.key_attr
            values[":pk"] = {"S": schema.static_pk_value}
            request["KeyConditionExpression"] = "#pk = :pk" + (
                f" AND {prefix_condition}" if prefix else ""
            )
        elif prefix:
            request["FilterExpression"] = prefix_condition
        request["ExpressionAttributeNames"] = names
        if values:
            request["ExpressionAttributeValues"] = values
        return request

    def _delete_condition(self, live_cutoff_ms: int | None) -> dict[str, Any]:
        """Return the condition of `delete`: the record exists (and, with a cutoff, is not live)."""
        schema = self._schema
        names = {"#key": schema.idempotency_key_attr}
        condition = "attribute_exists(#key)"
        if live_cutoff_ms is None:
            return {"ConditionExpression": condition, "ExpressionAttributeNames": names}
        names |= {
            "#status": schema.status_attr,
            "#lease": schema.in_progress_expiry_attr,
            "#expiry": schema.expiry_attr,
        }
        return {
            "ConditionExpression": f"{condition} AND (NOT ({_IS_IN_PROGRESS})"
            " OR #lease < :cutoff_ms OR (attribute_not_exists(#lease) AND #expiry < :cutoff_s))",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": {
                **_IN_PROGRESS_VALUES,
                ":cutoff_ms": {"N": str(live_cutoff_ms)},
                ":cutoff_s": {"N": str(live_cutoff_ms // 1000)},
            },
        }


def create_idempotency_table(
    client: DynamoDBClient | None = None,
    *,
    table_name: str,
    endpoint_url: str | None = None,
    region_name: str = "us-east-1",
    key_attr: str = "id",
    sort_key_attr: str | None = None,
    expiry_attr: str = "expiration",
    wait: bool = True,
    outbox: bool = False,
) -> bool:
    """Create an on-demand table laid out for `DynamoDBPersistenceLayer`, with TTL on expiry.

    Safe to call again: an existing table is left as it is (its key schema is not checked).
    Enabling TTL is best effort, since some local endpoints do not support it and the library
    checks expiry in code anyway; a failure there is logged, not raised.

    Args:
        client: A ``dynamodb`` client; by default one is built for ``endpoint_url`` and
            ``region_name`` (``AWS_ENDPOINT_URL_DYNAMODB`` applies when ``endpoint_url`` is None).
        table_name: Name of the table.
        endpoint_url: Endpoint of a local DynamoDB-compatible server, when building the client.
        region_name: Region, when building the client.
        key_attr: Partition key attribute (type S); must match the store's ``key_attr``.
        sort_key_attr: Sort key attribute (type S), for the store's composite-key mode.
        expiry_attr: The store's ``expiry_attr``, made the table's TTL attribute.
        wait: Block until the table is ACTIVE.
        outbox: Also create the sparse index of unpublished outbox events that
            `idempotent_lambda.outbox.sweep_handler` reads (``OUTBOX_INDEX``).

    Returns:
        True when the table was created, False when it existed already.

    Raises:
        botocore.exceptions.ClientError: The table could not be created.
    """
    if client is None:
        import boto3

        client = boto3.client("dynamodb", endpoint_url=endpoint_url, region_name=region_name)
    key_schema: list[KeySchemaElementTypeDef] = [{"AttributeName": key_attr, "KeyType": "HASH"}]
    attributes: list[AttributeDefinitionTypeDef] = [
        {"AttributeName": key_attr, "AttributeType": "S"}
    ]
    if sort_key_attr is not None:
        key_schema.append({"AttributeName": sort_key_attr, "KeyType": "RANGE"})
        attributes.append({"AttributeName": sort_key_attr, "AttributeType": "S"})
    created = True
    indexes: dict[str, Any] = {}
    if outbox:
        attributes += [
            {"AttributeName": PENDING, "AttributeType": "S"},
            {"AttributeName": EMITTED_AT, "AttributeType": "N"},
        ]
        indexes["GlobalSecondaryIndexes"] = [
            {
                "IndexName": OUTBOX_INDEX,
                "KeySchema": [
                    {"AttributeName": PENDING, "KeyType": "HASH"},
                    {"AttributeName": EMITTED_AT, "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ]
    try:
        client.create_table(
            TableName=table_name,
            KeySchema=key_schema,
            AttributeDefinitions=attributes,
            BillingMode="PAY_PER_REQUEST",
            **indexes,
        )
    except client.exceptions.ResourceInUseException:
        logger.debug("table %s already exists", table_name)
        created = False
    if wait:
        client.get_waiter("table_exists").wait(
            TableName=table_name, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
        )
    try:
        client.update_time_to_live(
            TableName=table_name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": expiry_attr},
        )
    except client.exceptions.ClientError as exc:
        code, message = error_details(exc)
        if "already enabled" not in message.lower():
            code = code or "unknown"
            logger.warning("could not enable TTL on %s.%s: %s", table_name, expiry_attr, code)
    return created


def describe_idempotency_table(client: DynamoDBClient, table_name: str) -> dict[str, str | None]:
    """Return the table's actual layout: status, partition and sort key, TTL attribute and status.

    Raises:
        botocore.exceptions.ClientError: The table cannot be described (e.g. it does not exist).
    """
    description = client.describe_table(TableName=table_name)["Table"]
    keys = {k["KeyType"]: k["AttributeName"] for k in description.get("KeySchema", [])}
    ttl = client.describe_time_to_live(TableName=table_name).get("TimeToLiveDescription", {})
    return {
        "status": description.get("TableStatus"),
        "partition_key": keys.get("HASH"),
        "sort_key": keys.get("RANGE"),
        "ttl_attribute": ttl.get("AttributeName"),
        "ttl_status": ttl.get("TimeToLiveStatus"),
    }
