"""The idempotency record: what a store keeps for one key, and its status."""

from __future__ import annotations

import datetime
import enum
import time
from dataclasses import dataclass
from typing import Any

from idempotent_lambda._result_codec import decode_result


class Status(str, enum.Enum):
    """Lifecycle state of a record. Equal to the strings stored in the table.

    ``EXPIRED`` is never stored: it is derived when a record's expiration has passed.
    """

    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    EXPIRED = "EXPIRED"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    """One stored record, as a store reads or writes it.

    Attributes:
        idempotency_key: The full key, ``"{prefix}#{hexdigest}"``.
        status: `Status.IN_PROGRESS` or `Status.COMPLETED` as stored.
        expiry_timestamp: Epoch seconds after which the record no longer counts (the TTL value).
        in_progress_expiry_timestamp: Epoch milliseconds at which an IN_PROGRESS lease ends.
        response_data: The serialised result (see `idempotent_lambda._result_codec`), if completed.
        payload_hash: The validation hash, when payload validation is configured.
        owner: Token of the invocation that made the current claim.
    """

    idempotency_key: str
    status: Status
    expiry_timestamp: int | None = None
    in_progress_expiry_timestamp: int | None = None
    response_data: str | None = None
    payload_hash: str | None = None
    owner: str | None = None

    @property
    def is_expired(self) -> bool:
        """Tell whether the expiration has passed on the wall clock (Powertools' name)."""
        return self.expired_at(time.time_ns() // 1_000_000)

    def expired_at(self, now_ms: int) -> bool:
        """Tell whether the expiration has passed at ``now_ms`` (in seconds, as DynamoDB asks)."""
        return self.expiry_timestamp is not None and self.expiry_timestamp < now_ms // 1000

    def lease_passed(self, cutoff_ms: int) -> bool:
        """Tell whether the lease ended before ``cutoff_ms`` (without one: the expiration)."""
        if self.in_progress_expiry_timestamp is None:
            return self.expired_at(cutoff_ms)
        return self.in_progress_expiry_timestamp < cutoff_ms

    def effective_status(self, now_ms: int) -> Status:
        """Return the status as seen at ``now_ms``: EXPIRED once the expiration passed."""
        return Status.EXPIRED if self.expired_at(now_ms) else self.status

    def get_expiration_datetime(self) -> datetime.datetime | None:
        """Return the expiration as an aware UTC datetime (Powertools' DataRecord name)."""
        if self.expiry_timestamp is None:
            return None
        return datetime.datetime.fromtimestamp(self.expiry_timestamp, tz=datetime.timezone.utc)

    def response_json_as_dict(self) -> Any:
        """Decode the stored result (Powertools' DataRecord name); None when there is none."""
        return None if self.response_data is None else decode_result(self.response_data)
