"""The attribute names every stored layout gives a record, and reading a record back by them.

The DynamoDB item, the Redis hash and Powertools' Redis JSON hold the same logical record under
the same six configurable names; each layout only differs in how it encodes the values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from idempotent_lambda.record import IdempotencyRecord, Status


@dataclass(frozen=True, slots=True)
class RecordNames:
    """Names of a record's attributes (DynamoDB attributes, hash fields or JSON keys)."""

    expiry_attr: str
    in_progress_expiry_attr: str
    status_attr: str
    data_attr: str
    validation_key_attr: str
    owner_attr: str

    def record(
        self,
        idempotency_key: str,
        status: Status,
        *,
        integer: Callable[[str], int | None],
        text: Callable[[str], str | None],
        data: str | None,
    ) -> IdempotencyRecord:
        """Return the record whose attributes ``integer`` and ``text`` read by name.

        Each reader returns None for an absent attribute and raises the layout's own corrupt
        record error for one of the wrong type.
        """
        return IdempotencyRecord(
            idempotency_key=idempotency_key,
            status=status,
            expiry_timestamp=integer(self.expiry_attr),
            in_progress_expiry_timestamp=integer(self.in_progress_expiry_attr),
            response_data=data,
            payload_hash=text(self.validation_key_attr),
            owner=text(self.owner_attr),
        )


def stored_status(value: object, in_progress_value: str) -> Status | None:
    """Return the status ``value`` spells (IN_PROGRESS as ``in_progress_value``), else None."""
    if value == in_progress_value:
        return Status.IN_PROGRESS
    if value == Status.COMPLETED.value:
        return Status.COMPLETED
    return None
