"""`DataRecord`: a record as a store written against Powertools' contract sees it.

Powertools' module path ``persistence.datarecord``. The library's own record type is
`idempotent_lambda.record.IdempotencyRecord`; `DataRecord` exists for stores that subclass
`idempotent_lambda.persistence.base.BasePersistenceLayer` and for code that builds or reads
records the Powertools way. Its status strings are Powertools' (``"INPROGRESS"``).
"""

from __future__ import annotations

import datetime
import time
from types import MappingProxyType
from typing import Any

STATUS_CONSTANTS = MappingProxyType(
    {"INPROGRESS": "INPROGRESS", "COMPLETED": "COMPLETED", "EXPIRED": "EXPIRED"}
)
"""Powertools' status spellings, by name."""


class DataRecord:
    """One idempotency record in Powertools' shape (mutable, status as a plain string).

    Args:
        idempotency_key: The full key, ``"{prefix}#{hexdigest}"``.
        status: ``"INPROGRESS"`` or ``"COMPLETED"`` as stored.
        expiry_timestamp: Epoch seconds after which the record no longer counts.
        in_progress_expiry_timestamp: Epoch milliseconds at which an in-progress lease ends.
        response_data: The stored result (JSON text), ``""`` when there is none.
        payload_hash: The validation hash, ``""`` when there is none.
        sort_key: The sort key value, for stores with composite keys.
    """

    def __init__(  # noqa: PLR0917 - Powertools' positional signature
        self,
        idempotency_key: str,
        status: str = "",
        expiry_timestamp: int | None = None,
        in_progress_expiry_timestamp: int | None = None,
        response_data: str = "",
        payload_hash: str = "",
        sort_key: str | None = None,
    ) -> None:
        self.idempotency_key = idempotency_key
        self.payload_hash = payload_hash
        self.expiry_timestamp = expiry_timestamp
        self.in_progress_expiry_timestamp = in_progress_expiry_timestamp
        self._status = status
        self.response_data = response_data
        self.sort_key = sort_key

    @property
    def is_expired(self) -> bool:
        """Tell whether the expiration has passed, on the wall clock."""
        return bool(self.expiry_timestamp) and int(time.time()) > int(self.expiry_timestamp or 0)

    @property
    def status(self) -> str:
        """Return the status: ``"EXPIRED"`` once the expiration passed, else the stored one.

        Raises:
            IdempotencyInvalidStatusError: The stored status is not a known one.
        """
        if self.is_expired:
            return STATUS_CONSTANTS["EXPIRED"]
        if self._status in STATUS_CONSTANTS.values():
            return self._status
        from idempotent_lambda.exceptions import IdempotencyInvalidStatusError

        raise IdempotencyInvalidStatusError(f"unknown record status {self._status!r}")

    def response_json_as_dict(self) -> Any:
        """Decode the stored result; None when there is none."""
        if not self.response_data:
            return None
        from idempotent_lambda._result_codec import decode_result

        return decode_result(self.response_data)

    def get_expiration_datetime(self) -> datetime.datetime | None:
        """Return the expiration as an aware UTC datetime, or None when there is none."""
        if not self.expiry_timestamp:
            return None
        return datetime.datetime.fromtimestamp(int(self.expiry_timestamp), tz=datetime.timezone.utc)

    def __repr__(self) -> str:
        return f"DataRecord(idempotency_key={self.idempotency_key!r}, status={self._status!r})"


__all__ = ["STATUS_CONSTANTS", "DataRecord"]
