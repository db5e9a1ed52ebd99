"""Stores written against Powertools' contract (`BasePersistenceLayer`, `DataRecord`).

A Powertools-style store subclasses `BasePersistenceLayer` and implements ``_put_record``,
``_get_record``, ``_update_record`` and ``_delete_record``; this module maps them onto the
`PersistenceStore` Protocol, so such a store works with every decorator here. What it can and
cannot give (no owner fencing, takeover only if ``_put_record`` allows it) is in the docs, in
"Custom stores and fencing" of the migration guide.
"""

from __future__ import annotations

import abc
import datetime
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from idempotent_lambda._clock import SYSTEM_CLOCK, Clock
from idempotent_lambda._record_format import POWERTOOLS_IN_PROGRESS, STATUS_CONSTANTS
from idempotent_lambda._result_codec import decode_result
from idempotent_lambda.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyError,
    IdempotencyInconsistentStateError,
    IdempotencyInvalidStatusError,
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
    IdempotencyPersistenceLayerError,
)
from idempotent_lambda.persistence.protocol import ClaimOutcome, claim_allowed, decode_stored_data
from idempotent_lambda.record import IdempotencyRecord, Status

_TO_STORED = {Status.IN_PROGRESS: POWERTOOLS_IN_PROGRESS, Status.COMPLETED: "COMPLETED"}
_FROM_STORED = {
    POWERTOOLS_IN_PROGRESS: Status.IN_PROGRESS,
    "IN_PROGRESS": Status.IN_PROGRESS,  # a store that writes our spelling
    "COMPLETED": Status.COMPLETED,
}


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
        """Return ``"EXPIRED"`` once the expiration passed, else the stored status.

        Raises:
            IdempotencyInvalidStatusError: The stored status is not a known one.
        """
        if self.is_expired:
            return STATUS_CONSTANTS["EXPIRED"]
        if self._status in STATUS_CONSTANTS.values():
            return self._status
        raise IdempotencyInvalidStatusError(f"unknown record status {self._status!r}")

    def response_json_as_dict(self) -> Any:
        """Decode the stored result; None when there is none."""
        return decode_result(self.response_data) if self.response_data else None

    def get_expiration_datetime(self) -> datetime.datetime | None:
        """Return the expiration as an aware UTC datetime, or None when there is none."""
        if not self.expiry_timestamp:
            return None
        return datetime.datetime.fromtimestamp(int(self.expiry_timestamp), tz=datetime.timezone.utc)

    def __repr__(self) -> str:
        return f"DataRecord(idempotency_key={self.idempotency_key!r}, status={self._status!r})"


class BasePersistenceLayer(abc.ABC):
    """Base class of stores written against Powertools' ``BasePersistenceLayer`` contract.

    Subclass it, call ``super().__init__()``, and implement ``_put_record``, ``_get_record``,
    ``_update_record`` and ``_delete_record``; the result is a `PersistenceStore`.

    Attributes:
        payload_validation_enabled: Always True here, so a store that writes the validation
            hash only when validation is on always writes it (``""`` when a function validates
            nothing): the setting belongs to each decorated function, not to the store.
        expires_after_seconds: Informational; each function's config decides expiry.
        clock: Time source of the engine.
    """

    clock: Clock = SYSTEM_CLOCK

    def __init__(self) -> None:
        self.function_name = ""
        self.configured = False
        self.event_key_jmespath = ""
        self.payload_validation_enabled = True
        self.raise_on_no_idempotency_key = False
        self.expires_after_seconds = 60 * 60
        self.use_local_cache = False

    @abc.abstractmethod
    def _get_record(self, idempotency_key: str) -> DataRecord:
        """Return the record for ``idempotency_key``; raise `IdempotencyItemNotFoundError`."""

    @abc.abstractmethod
    def _put_record(self, data_record: DataRecord) -> None:
        """Write ``data_record`` unless a live record holds the key.

        Raises:
            IdempotencyItemAlreadyExistsError: A live record holds the key (pass it as
                ``old_data_record`` to save a read).
        """

    @abc.abstractmethod
    def _update_record(self, data_record: DataRecord) -> None:
        """Overwrite the record with ``data_record`` (COMPLETED, with the result)."""

    @abc.abstractmethod
    def _delete_record(self, data_record: DataRecord) -> None:
        """Delete the record of ``data_record.idempotency_key``."""

    def claim(
        self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int
    ) -> ClaimOutcome:
        """Write ``record`` with ``_put_record``; on refusal return the record that blocked it.

        Raises:
            IdempotencyAlreadyInProgressError: The store refused to take over an IN_PROGRESS
                record whose lease has passed; the key is blocked until its expiration.
            IdempotencyInconsistentStateError: The store refused to replace an expired record,
                or the blocking record vanished twice before it could be read.
        """
        key = record.idempotency_key
        for _attempt in range(2):
            try:
                with _translated("_put_record"):
                    self._put_record(data_record=to_data_record(record))
            except IdempotencyItemAlreadyExistsError as exc:
                old = exc.old_data_record
                existing = from_data_record(old) if old is not None else self.get(key)
            else:
                return ClaimOutcome(claimed=True, previous=None)
            if existing is None:  # deleted between the two requests: try again
                continue
            if not claim_allowed(existing, now_ms=now_ms, lease_cutoff_ms=lease_cutoff_ms):
                return ClaimOutcome(claimed=False, previous=existing)
            if existing.status is Status.IN_PROGRESS and not existing.expired_at(now_ms):
                expiry = existing.expiry_timestamp
                raise IdempotencyAlreadyInProgressError(
                    "the store does not take over an IN_PROGRESS record whose lease has passed; "
                    "the key is blocked until the record expires",
                    lease_expires_at_ms=None if expiry is None else expiry * 1000,
                )
            raise IdempotencyInconsistentStateError(
                "the store refused to replace an expired record"
            )
        raise IdempotencyInconsistentStateError(
            "the store refused the claim, but holds no record for the key"
        )

    def complete(self, record: IdempotencyRecord) -> bool:
        """Overwrite the record with ``_update_record``; unfenced, so always True."""
        with _translated("_update_record"):
            self._update_record(data_record=to_data_record(record))
        return True

    def release(self, idempotency_key: str, owner: str) -> bool:
        """Delete the record with ``_delete_record``; unfenced, so always True."""
        with _translated("_delete_record"):
            self._delete_record(data_record=DataRecord(idempotency_key=idempotency_key))
        return True

    def get(self, idempotency_key: str) -> IdempotencyRecord | None:
        """Read the record with ``_get_record``; None when it raises the not-found error."""
        try:
            with _translated("_get_record"):
                found = self._get_record(idempotency_key=idempotency_key)
        except IdempotencyItemNotFoundError:
            return None
        return None if found is None else from_data_record(found)


def to_data_record(record: IdempotencyRecord) -> DataRecord:
    """Return ``record`` as the `DataRecord` a Powertools-style store writes."""
    return DataRecord(
        idempotency_key=record.idempotency_key,
        status=_TO_STORED.get(record.status, record.status.value),
        expiry_timestamp=record.expiry_timestamp,
        in_progress_expiry_timestamp=record.in_progress_expiry_timestamp,
        response_data=record.response_data or "",
        payload_hash=record.payload_hash or "",
    )


def from_data_record(data_record: DataRecord) -> IdempotencyRecord:
    """Return the `IdempotencyRecord` a `DataRecord` read from a store stands for.

    Raises:
        IdempotencyInvalidStatusError: Its stored status is not a known one.
    """
    stored = data_record._status  # the stored spelling, not the derived EXPIRED
    status = _FROM_STORED.get(str(stored))
    if status is None:
        raise IdempotencyInvalidStatusError(f"unknown record status {stored!r}")
    data = data_record.response_data
    lease = data_record.in_progress_expiry_timestamp
    expiry = data_record.expiry_timestamp
    return IdempotencyRecord(
        data_record.idempotency_key,
        status,
        None if expiry is None else int(expiry),
        None if lease is None else int(lease),
        decode_stored_data(data) if data else None,
        data_record.payload_hash or None,
    )


@contextmanager
def _translated(method: str) -> Iterator[None]:
    """Turn whatever a store method raises into our error type (ours pass through)."""
    try:
        yield
    except IdempotencyError:
        raise
    except Exception as exc:
        raise IdempotencyPersistenceLayerError(
            f"the store's {method} failed: {type(exc).__name__}"
        ) from exc
