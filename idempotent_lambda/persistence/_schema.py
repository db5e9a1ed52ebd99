"""A record's attribute layout (schema): its names, and reading a record back by them.

The DynamoDB item, the Redis hash and Powertools' Redis JSON hold the same logical record under
the same six configurable names; each layout only differs in how it encodes the values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from idempotent_lambda.record import IdempotencyRecord, Status

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RecordSchema:
    """Names of a record's attributes (DynamoDB attributes, hash fields or JSON keys)."""

    expiry_attr: str
    in_progress_expiry_attr: str
    status_attr: str
    data_attr: str
    validation_key_attr: str
    owner_attr: str

    def record(  # noqa: PLR0917 - one positional call per layout
        self,
        idempotency_key: str,
        status: Status,
        stored: T,
        integer: Callable[[T, str], int | None],
        text: Callable[[T, str], str | None],
        data: str | None,
    ) -> IdempotencyRecord:
        """Return the record whose attributes ``integer`` and ``text`` read from ``stored``.

        Each reader takes ``stored`` and an attribute name, returns None for an absent
        attribute and raises the layout's own corrupt record error for one of the wrong type.
        """
        return IdempotencyRecord(
            idempotency_key=idempotency_key,
            status=status,
            expiry_timestamp=integer(stored, self.expiry_attr),
            in_progress_expiry_timestamp=integer(stored, self.in_progress_expiry_attr),
            response_data=data,
            payload_hash=text(stored, self.validation_key_attr),
            owner=text(stored, self.owner_attr),
        )


def stored_status(value: object, in_progress_value: str) -> Status | None:
    """Return the status ``value`` spells (IN_PROGRESS as ``in_progress_value``), else None."""
    if value == in_progress_value:
        return Status.IN_PROGRESS
    if value == Status.COMPLETED.value:
        return Status.COMPLETED
    return None
