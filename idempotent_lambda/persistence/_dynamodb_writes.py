"""The conditional writes on one record: claim, complete and release, as DynamoDB requests.

A claim is a ``PutItem`` that succeeds only where `persistence.protocol.claim_allowed` allows
one. Completion and release are fenced on the record still being IN_PROGRESS under the caller's
owner token, so an invocation whose lease was taken over cannot touch the newer claim. The
store builds the items and sends every request through its one error boundary (``request``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, cast

from idempotent_lambda.exceptions import (
    IdempotencyPersistenceLayerError,
    IdempotencyUnstorableResultError,
)
from idempotent_lambda.persistence._dynamodb_item import CorruptItemError, ItemSchema
from idempotent_lambda.persistence.protocol import ClaimOutcome
from idempotent_lambda.record import IdempotencyRecord

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

    #: The store's translation boundary: yields the client, maps botocore errors.
    Request = Callable[[str], AbstractContextManager[DynamoDBClient]]

#: Claim condition; must agree with `idempotent_lambda.persistence.base.claim_allowed`.
CLAIM_CONDITION = (
    "attribute_not_exists(#key) OR #expiry < :now_s"
    " OR (#status = :in_progress AND #lease < :cutoff_ms)"
)


def claim(
    request: Request,
    schema: ItemSchema,
    table: str,
    record: IdempotencyRecord,
    encode: Callable[[IdempotencyRecord], str | bytes | None],
    *,
    now_ms: int,
    lease_cutoff_ms: int,
    resolve: Callable[[IdempotencyRecord], IdempotencyRecord],
    read: Callable[[str], IdempotencyRecord | None],
) -> ClaimOutcome:
    """Put ``record`` (IN_PROGRESS) unless a live record holds its key; see the store's claim.

    Args:
        request: The store's error boundary.
        schema: The item layout.
        table: The table name.
        record: The claim.
        encode: The store's encoding of a record's result for the item.
        now_ms: The claimer's clock.
        lease_cutoff_ms: Leases that ended before this may be taken over.
        resolve: Fetches an offloaded result of the blocking record.
        read: Reads the blocking record, for endpoints that do not send it back.
    """
    with request("PutItem") as client:
        try:
            response = client.put_item(
                TableName=table,
                Item=schema.to_item(record, encode(record)),
                ConditionExpression=CLAIM_CONDITION,
                ExpressionAttributeNames={
                    "#key": schema.idempotency_key_attr,
                    "#expiry": schema.expiry_attr,
                    "#status": schema.status_attr,
                    "#lease": schema.in_progress_expiry_attr,
                },
                ExpressionAttributeValues={
                    ":now_s": {"N": str(now_ms // 1000)},
                    ":in_progress": {"S": schema.in_progress_value},
                    ":cutoff_ms": {"N": str(lease_cutoff_ms)},
                },
                ReturnValues="ALL_OLD",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except client.exceptions.ConditionalCheckFailedException as exc:
            blocking = cast("Mapping[str, Any]", exc.response).get("Item")
            if blocking is None:
                # Endpoints that ignore ReturnValuesOnConditionCheckFailure: read it instead.
                return _blocked_without_item(read, record.idempotency_key, exc)
            return ClaimOutcome(claimed=False, previous=resolve(schema.from_item(blocking)))
    return ClaimOutcome(claimed=True, previous=_replaced(schema, response.get("Attributes")))


def complete(
    request: Request, schema: ItemSchema, table: str, item: Any, owner: str | None
) -> bool:
    """Put the COMPLETED ``item`` if the record is still IN_PROGRESS under ``owner``.

    Raises:
        IdempotencyUnstorableResultError: The result is too large for an item.
    """
    with request("PutItem") as client:
        try:
            client.put_item(TableName=table, Item=item, **owned_by(schema, owner))
        except client.exceptions.ConditionalCheckFailedException:
            return False
        except client.exceptions.ClientError as exc:
            error = exc.response.get("Error", {})
            if error.get("Code") == "ValidationException" and "size" in (
                error.get("Message", "").lower()
            ):
                raise IdempotencyUnstorableResultError(
                    "the result does not fit in a DynamoDB item (400 KB limit)"
                ) from exc
            raise
    return True


def release(request: Request, schema: ItemSchema, table: str, key: str, owner: str) -> bool:
    """Delete the record of ``key`` if it is still IN_PROGRESS under ``owner``."""
    with request("DeleteItem") as client:
        try:
            client.delete_item(TableName=table, Key=schema.key(key), **owned_by(schema, owner))
        except client.exceptions.ConditionalCheckFailedException:
            return False
    return True


def owned_by(schema: ItemSchema, owner: str | None) -> dict[str, Any]:
    """Return the condition arguments fencing a write on ``status = IN_PROGRESS AND owner``."""
    names = {"#status": schema.status_attr, "#owner": schema.owner_attr}
    values: dict[str, AttributeValueTypeDef] = {":in_progress": {"S": schema.in_progress_value}}
    if owner is None:
        condition = "#status = :in_progress AND attribute_not_exists(#owner)"
    else:
        condition = "#status = :in_progress AND #owner = :owner"
        values[":owner"] = {"S": owner}
    return {
        "ConditionExpression": condition,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }


def _replaced(schema: ItemSchema, item: Mapping[str, Any] | None) -> IdempotencyRecord | None:
    """Return the record a successful claim replaced: None when none, or when unreadable.

    The claim is already written by then: an old item that expired while corrupt must not
    fail it, or the body would never run while the new IN_PROGRESS item blocked the key
    until its lease ended. The engine only uses it to tell a takeover from a fresh claim.
    """
    if not item:
        return None
    try:
        return schema.from_item(item)
    except CorruptItemError:
        return None


def _blocked_without_item(
    read: Callable[[str], IdempotencyRecord | None], key: str, exc: Exception
) -> ClaimOutcome:
    blocking = read(key)
    if blocking is None:
        raise IdempotencyPersistenceLayerError(
            "DynamoDB PutItem failed: ConditionalCheckFailedException, and no blocking record"
        ) from exc
    return ClaimOutcome(claimed=False, previous=blocking)
