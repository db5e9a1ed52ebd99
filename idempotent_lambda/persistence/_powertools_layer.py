"""`BasePersistenceLayer`: stores written against Powertools' contract, run on our lifecycle.

A Powertools-style store subclasses `BasePersistenceLayer` and implements four methods:
``_put_record`` (write unless a live record holds the key, else raise
`IdempotencyItemAlreadyExistsError`), ``_get_record`` (read, or raise
`IdempotencyItemNotFoundError`), ``_update_record`` (overwrite) and ``_delete_record``. This class
maps them onto the `PersistenceStore` Protocol (``claim``/``complete``/``release``/``get``), so
such a store works with every decorator here unchanged.

What such a store can and cannot give, compared with the built-in stores:

- Claims are as safe as its ``_put_record`` condition: a conditional write gives "one body at a
  time" exactly as with the built-in stores.
- No owner fencing: the contract carries no owner token and ``_update_record``/``_delete_record``
  are unconditional, so an invocation whose lease was taken over can overwrite or delete the
  newer owner's record (Powertools' own behaviour). Completion and release always report success.
- Takeover of an abandoned IN_PROGRESS record happens only if ``_put_record`` allows it (its
  condition checks the in-progress expiry, as Powertools' DynamoDB store does). If it refuses,
  the key stays blocked until the record's expiration and duplicates get
  `IdempotencyAlreadyInProgressError`.
- A claim that needs the blocking record costs two requests (``_put_record``, then
  ``_get_record``) unless the store passes it as ``old_data_record`` on the error.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from contextlib import contextmanager

from idempotent_lambda._clock import SYSTEM_CLOCK, Clock
from idempotent_lambda.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyError,
    IdempotencyInconsistentStateError,
    IdempotencyInvalidStatusError,
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
    IdempotencyPersistenceLayerError,
)
from idempotent_lambda.persistence.datarecord import STATUS_CONSTANTS, DataRecord
from idempotent_lambda.persistence.protocol import ClaimOutcome, claim_allowed, decode_stored_data
from idempotent_lambda.record import IdempotencyRecord, Status

_TO_STORED = {Status.IN_PROGRESS: STATUS_CONSTANTS["INPROGRESS"], Status.COMPLETED: "COMPLETED"}
_FROM_STORED = {"INPROGRESS": Status.IN_PROGRESS, "IN_PROGRESS": Status.IN_PROGRESS}
_FROM_STORED["COMPLETED"] = Status.COMPLETED


class BasePersistenceLayer(abc.ABC):
    """Base class of stores written against Powertools' ``BasePersistenceLayer`` contract.

    Subclass it, call ``super().__init__()``, and implement ``_put_record``, ``_get_record``,
    ``_update_record`` and ``_delete_record``; the result is a `PersistenceStore`. The
    guarantees such a store gives are listed in this module's documentation.

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
