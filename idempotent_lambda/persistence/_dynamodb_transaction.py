"""Transactional completion on DynamoDB: check the writes, read a cancellation.

The request is one ``TransactWriteItems``: the business writes in the order they were queued,
then the COMPLETED record's ``Put`` (conditioned on ``status = IN_PROGRESS AND owner = :token``).
DynamoDB answers a cancelled transaction with one reason per item, in the same order, so the last
reason is ours: ``ConditionalCheckFailed`` there means the lease was taken over.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from idempotent_lambda.exceptions import (
    CancellationReason,
    IdempotencyPersistenceLayerError,
    IdempotencyTransactionConflictError,
    IdempotencyTransactionError,
)
from idempotent_lambda.persistence.protocol import MAX_TRANSACTION_WRITES, TransactItem

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

#: Cancellation codes worth sending the same transaction again for (nothing was written).
TRANSIENT_CODES = frozenset(
    {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
)
#: Attempts at a transaction cancelled for transient reasons only, and the pauses between them.
ATTEMPTS = 3
BACKOFF_S = (0.05, 0.2)
_CONDITION_FAILED = "ConditionalCheckFailed"


@dataclass(frozen=True, slots=True)
class Cancellation:
    """What a cancelled transaction says.

    Attributes:
        lease_lost: Our own record's condition failed.
        reasons: One reason per business write.
        codes: Every failing code, ours included.
    """

    lease_lost: bool
    reasons: tuple[CancellationReason, ...]
    codes: frozenset[str]

    @property
    def transient(self) -> bool:
        """Tell whether sending the transaction again may succeed."""
        return bool(self.codes) and self.codes <= TRANSIENT_CODES

    def error(self) -> IdempotencyTransactionError | None:
        """Return the error a business failure means; None when it is not the writes' fault."""
        failed = [r for r in self.reasons if r.failed and r.code not in TRANSIENT_CODES]
        if not failed:
            return None
        summary = "; ".join(
            f"write {r.index} ({r.operation} on {r.table}): {r.code}" for r in failed
        )
        if any(r.code == _CONDITION_FAILED for r in failed):
            return IdempotencyTransactionConflictError(
                f"transaction cancelled, nothing was written: {summary}", reasons=self.reasons
            )
        return IdempotencyTransactionError(f"transaction cancelled, nothing was written: {summary}")


def check_writes(
    writes: Sequence[TransactItem], *, table_name: str, record_key: Mapping[str, Any] | None
) -> None:
    """Refuse writes DynamoDB would reject for reasons we can see before sending.

    Raises:
        IdempotencyTransactionError: Too many writes, or one on the invocation's own record.
    """
    if len(writes) > MAX_TRANSACTION_WRITES:
        raise IdempotencyTransactionError(
            f"{len(writes)} business writes: a transaction holds at most {MAX_TRANSACTION_WRITES} "
            "besides the idempotency record"
        )
    if record_key is None:
        return
    for index, write in enumerate(writes):
        ((_, body),) = write.items()
        if body.get("TableName") != table_name:
            continue
        target = body.get("Key") or body.get("Item") or {}
        if all(target.get(name) == value for name, value in record_key.items()):
            raise IdempotencyTransactionError(
                f"write {index} targets this invocation's own idempotency record"
            )


def read_cancellation(
    response: Mapping[str, Any], writes: Sequence[TransactItem], *, with_record: bool
) -> Cancellation:
    """Interpret a ``TransactionCanceledException`` response.

    Args:
        response: The exception's ``response``.
        writes: The business writes, as sent.
        with_record: Whether our record's ``Put`` followed them.
    """
    raw = list(response.get("CancellationReasons") or [])
    if not raw:  # an endpoint that sends no reasons: nothing to blame, retry is pointless
        return Cancellation(lease_lost=False, reasons=(), codes=frozenset({"Unknown"}))
    reasons = []
    for index, write in enumerate(writes):
        ((operation, body),) = write.items()
        reason = raw[index] if index < len(raw) else {}
        reasons.append(
            CancellationReason(
                index=index,
                operation=operation,
                table=str(body.get("TableName")),
                code=str(reason.get("Code") or "None"),
                message=reason.get("Message"),
                item=reason.get("Item"),
            )
        )
    own = raw[len(writes)] if with_record and len(raw) > len(writes) else {}
    own_code = str(own.get("Code") or "None")
    codes = {r.code for r in reasons if r.failed}
    if own_code != "None":
        codes.add(own_code)
    return Cancellation(
        lease_lost=own_code == _CONDITION_FAILED, reasons=tuple(reasons), codes=frozenset(codes)
    )


def send(
    request: Callable[[str], AbstractContextManager[DynamoDBClient]],
    items: list[TransactItem],
    writes: Sequence[TransactItem],
    *,
    with_record: bool,
) -> bool:
    """Send ``items`` in one ``TransactWriteItems``, retrying transient cancellations.

    Args:
        request: The store's translation boundary (yields the client, maps botocore errors).
        items: The whole request: ``writes``, then our record's ``Put`` when ``with_record``.
        writes: The business writes.
        with_record: Whether the last item is our record's conditional ``Put``.

    Returns:
        False when our record's condition failed (nothing was written).

    Raises:
        IdempotencyTransactionConflictError: A business write's condition failed.
        IdempotencyTransactionError: DynamoDB found the writes invalid.
        IdempotencyPersistenceLayerError: Any other failure, after retries where they may help.
    """
    sent = cast("list[TransactWriteItemTypeDef]", items)
    for attempt in range(ATTEMPTS):
        with request("TransactWriteItems") as client:
            try:
                client.transact_write_items(TransactItems=sent)
                return True
            except client.exceptions.TransactionCanceledException as exc:
                response = cast("Mapping[str, Any]", exc.response)
                cancelled = read_cancellation(response, writes, with_record=with_record)
                error = exc
            except client.exceptions.ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "ValidationException":
                    raise
                raise IdempotencyTransactionError(
                    "DynamoDB rejected the transaction (ValidationException; see the cause), "
                    "nothing was written"
                ) from exc
        if cancelled.lease_lost:
            return False
        business_error = cancelled.error()
        if business_error is not None:
            raise business_error from error
        if not cancelled.transient or attempt + 1 == ATTEMPTS:
            codes = ",".join(sorted(cancelled.codes))
            raise IdempotencyPersistenceLayerError(
                f"DynamoDB TransactWriteItems cancelled: {codes}"
            ) from error
        time.sleep(BACKOFF_S[attempt])
    raise AssertionError("unreachable")  # pragma: no cover
