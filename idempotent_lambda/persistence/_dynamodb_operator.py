"""Requests behind the operator methods of the DynamoDB store: scan, conditional delete, release.

These serve `idempotent_lambda.cli` (an operator inspecting or repairing a table), never the
invocation path. Each builds the request arguments from the item layout; the store sends them
through its one error boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from idempotent_lambda.persistence._dynamodb_item import CorruptItemError, ItemSchema
from idempotent_lambda.record import IdempotencyRecord

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

    #: The store's translation boundary: yields the client, maps botocore errors.
    Request = Callable[[str], AbstractContextManager[DynamoDBClient]]


@dataclass(frozen=True, slots=True)
class ScanPage:
    """One page of a table read.

    Attributes:
        records: The records on the page whose key matched.
        scanned: Items the page read (DynamoDB's ``ScannedCount``).
        skipped: Items on the page that are not idempotency records.
    """

    records: tuple[IdempotencyRecord, ...]
    scanned: int
    skipped: int


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


def _scan_request(
    schema: ItemSchema,
    table: str,
    *,
    prefix: str | None,
    page_size: int | None,
) -> dict[str, Any]:
    """Return the first ``Scan`` (simple key) or ``Query`` (composite key) request of a read.

    In composite-key mode only the store's partition is read. Results are not read.
    """
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
    request: dict[str, Any] = {"TableName": table, "ProjectionExpression": ", ".join(names)}
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


def _delete_condition(schema: ItemSchema, *, live_cutoff_ms: int | None) -> dict[str, Any]:
    """Return the condition of deleting an existing record.

    With ``live_cutoff_ms``, an IN_PROGRESS record is deleted only when its lease ended before
    it (or, without a lease end, its expiration did): a claim that may still be running stays.
    """
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
        "ConditionExpression": condition + " AND (#status <> :in_progress OR #lease < :cutoff_ms"
        " OR (attribute_not_exists(#lease) AND #expiry < :cutoff_s))",
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": {
            ":in_progress": {"S": schema.in_progress_value},
            ":cutoff_ms": {"N": str(live_cutoff_ms)},
            ":cutoff_s": {"N": str(live_cutoff_ms // 1000)},
        },
    }


def _stuck_condition(schema: ItemSchema, seen: IdempotencyRecord, cutoff_ms: int) -> dict[str, Any]:
    """Return the condition that ``seen`` is still the same stuck claim.

    ``status = IN_PROGRESS AND owner = :seen_owner AND lease < :cutoff`` (for a record without a
    lease end: expiration passed), so a record claimed again since it was read is left alone.
    """
    names = {"#status": schema.status_attr, "#owner": schema.owner_attr}
    values: dict[str, Any] = {":in_progress": {"S": schema.in_progress_value}}
    owner = "attribute_not_exists(#owner)"
    if seen.owner is not None:
        owner = "#owner = :owner"
        values[":owner"] = {"S": seen.owner}
    names["#lease"] = schema.in_progress_expiry_attr
    if seen.in_progress_expiry_timestamp is not None:
        values[":cutoff_ms"] = {"N": str(cutoff_ms)}
        lease = "#lease < :cutoff_ms"
    else:
        names["#expiry"] = schema.expiry_attr
        values[":cutoff_s"] = {"N": str(cutoff_ms // 1000)}
        lease = "attribute_not_exists(#lease) AND #expiry < :cutoff_s"
    return {
        "ConditionExpression": f"#status = :in_progress AND {owner} AND {lease}",
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }


def scan(
    request: Request, schema: ItemSchema, table: str, *, prefix: str | None, page_size: int | None
) -> Iterator[ScanPage]:
    """Read the records whose key starts with ``prefix``, one page per request."""
    arguments = _scan_request(schema, table, prefix=prefix, page_size=page_size)
    operation = "Query" if schema.sort_key_attr else "Scan"
    while True:
        with request(operation) as client:
            read = client.query if schema.sort_key_attr else client.scan
            response = read(**arguments)
        items = response.get("Items", [])
        records = []
        for item in items:
            try:
                records.append(schema.from_item(item))
            except CorruptItemError:
                continue
        skipped = len(items) - len(records)
        yield ScanPage(tuple(records), response.get("ScannedCount", len(items)), skipped)
        last = response.get("LastEvaluatedKey")
        if not last:
            return
        arguments["ExclusiveStartKey"] = last


def delete(
    request: Request, schema: ItemSchema, table: str, key: str, live_cutoff_ms: int | None
) -> DeleteOutcome | None:
    """Delete the record of ``key`` under `_delete_condition`, in one request.

    Returns:
        What happened; None when the condition failed and the endpoint did not send the kept
        item back (the caller reads it).
    """
    with request("DeleteItem") as client:
        try:
            response = client.delete_item(
                TableName=table,
                Key=schema.key(key),
                ReturnValues="ALL_OLD",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **_delete_condition(schema, live_cutoff_ms=live_cutoff_ms),
            )
        except client.exceptions.ConditionalCheckFailedException as exc:
            kept = cast("Mapping[str, Any]", exc.response).get("Item")
            return None if kept is None else DeleteOutcome(False, schema.from_item(kept))
    return DeleteOutcome(True, schema.from_item(response.get("Attributes", {})))


def release_if_stuck(
    request: Request, schema: ItemSchema, table: str, seen: IdempotencyRecord, cutoff_ms: int
) -> bool:
    """Delete ``seen`` under `_stuck_condition`; False when the condition failed."""
    with request("DeleteItem") as client:
        try:
            client.delete_item(
                TableName=table,
                Key=schema.key(seen.idempotency_key),
                **_stuck_condition(schema, seen, cutoff_ms),
            )
        except client.exceptions.ConditionalCheckFailedException:
            return False
    return True
