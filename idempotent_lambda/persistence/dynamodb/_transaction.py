"""Transactional completion on DynamoDB: check the writes before sending, read a cancellation.

The store sends the business writes in the order they were queued, then the COMPLETED record's
fenced ``Put``. A cancelled transaction has one reason per item in the same order, so the last
reason is the record's: ``ConditionalCheckFailed`` there means the lease was taken over.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from idempotent_lambda.exceptions import (
    CancellationReason,
    IdempotencyError,
    IdempotencyPersistenceLayerError,
    IdempotencyTransactionConflictError,
    IdempotencyTransactionError,
)
from idempotent_lambda.persistence.protocol import MAX_TRANSACTION_WRITES, TransactItem

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

    def failure(self, *, last_attempt: bool) -> IdempotencyError | None:
        """Return the error this cancellation means; None when sending again may succeed."""
        failed = [r for r in self.reasons if r.failed and r.code not in TRANSIENT_CODES]
        if failed:
            summary = "; ".join(
                f"write {r.index} ({r.operation} on {r.table}): {r.code}" for r in failed
            )
            message = f"transaction cancelled, nothing was written: {summary}"
            if any(r.code == _CONDITION_FAILED for r in failed):
                return IdempotencyTransactionConflictError(message, reasons=self.reasons)
            return IdempotencyTransactionError(message)
        if self.codes and self.codes <= TRANSIENT_CODES and not last_attempt:
            return None
        codes = ",".join(sorted(self.codes))
        return IdempotencyPersistenceLayerError(f"DynamoDB TransactWriteItems cancelled: {codes}")


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
