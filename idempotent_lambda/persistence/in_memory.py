"""A store in process memory with the same conditional semantics as DynamoDB."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from idempotent_lambda._clock import SYSTEM_CLOCK, Clock
from idempotent_lambda._outbox_format import OutboxEvent, item_key
from idempotent_lambda._record_format import FORMATS
from idempotent_lambda.exceptions import IdempotencyConfigError, IdempotencyTransactionError
from idempotent_lambda.persistence.protocol import (
    DEFAULT_COMPRESSION_THRESHOLD_BYTES,
    MAX_TRANSACTION_WRITES,
    ClaimOutcome,
    TransactItem,
    claim_allowed,
    decode_stored_data,
    encode_stored_data,
)
from idempotent_lambda.record import IdempotencyRecord, Status

#: The table name of outbox writes in `InMemoryPersistenceLayer.committed_writes`.
OUTBOX_TABLE = "in-memory-outbox"


class InMemoryPersistenceLayer:
    """Keep records in a dict guarded by a lock: for unit tests and local runs.

    It enforces the same claim, owner-fencing and expiry rules as `DynamoDBPersistenceLayer` and
    stores results in the same encoded form, so a result that DynamoDB would reject fails here
    too. Records never leave memory on their own; expired ones are simply claimable.

    Business writes handed over with `idempotent_lambda.transaction.current_transaction` cannot
    be applied to DynamoDB tables from here. They commit with the record into
    `committed_writes` (low-level form, in order), so a unit test can assert on them; pass
    ``apply_writes`` to also apply them to a fake of your own (a dict, a moto table...). It is
    called under the store's lock, before the record is completed; if it raises (e.g.
    `IdempotencyTransactionConflictError` to act out a failed condition, which this store cannot
    evaluate), nothing is committed and the invocation fails as it would against DynamoDB.

    Args:
        clock: Time source; pass a controllable clock in tests to move time without sleeping.
        compression_threshold_bytes: Results above this size are kept zlib-compressed, and so
            is any result over the item limit, as in every store (see
            `persistence.protocol.encode_stored_data`).
        apply_writes: Called with each transaction's business writes before they commit.
    """

    def __init__(
        self,
        *,
        clock: Clock = SYSTEM_CLOCK,
        compression_threshold_bytes: int = DEFAULT_COMPRESSION_THRESHOLD_BYTES,
        apply_writes: Callable[[Sequence[TransactItem]], None] | None = None,
    ) -> None:
        self.clock = clock
        self.committed_writes: list[TransactItem] = []
        self._emitted: dict[str, OutboxEvent] = {}  # by item key: what each outbox write holds
        self._threshold = compression_threshold_bytes
        self._apply_writes = apply_writes
        self._records: dict[str, tuple[IdempotencyRecord, bytes | None]] = {}
        self._lock = threading.Lock()

    def with_record_format(self, record_format: str) -> InMemoryPersistenceLayer:
        """Return this store: it keeps records as objects, so every format is the same to it."""
        if record_format not in FORMATS:
            raise IdempotencyConfigError(f"unknown record_format {record_format!r}")
        return self

    def claim(
        self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int
    ) -> ClaimOutcome:
        """Store ``record`` unless a live record holds its key (see `PersistenceStore.claim`)."""
        with self._lock:
            existing = self._read(record.idempotency_key)
            if not claim_allowed(existing, now_ms=now_ms, lease_cutoff_ms=lease_cutoff_ms):
                return ClaimOutcome(False, existing)
            self._records[record.idempotency_key] = (record, None)
            return ClaimOutcome(True, existing)

    def complete(self, record: IdempotencyRecord) -> bool:
        """Replace the caller's IN_PROGRESS record, if it still owns it."""
        entry = self._entry(record)
        with self._lock:
            if not self._owned(record.idempotency_key, record.owner):
                return False
            self._records[record.idempotency_key] = entry
            return True

    def complete_with(self, record: IdempotencyRecord, writes: Sequence[TransactItem]) -> bool:
        """Complete the caller's record and commit ``writes`` with it, if it still owns it.

        Raises:
            IdempotencyTransactionError: Over the transaction limit.
            Exception: Whatever ``apply_writes`` raised; then nothing was committed.
        """
        entry = self._entry(record)
        with self._lock:
            if not self._owned(record.idempotency_key, record.owner):
                return False
            self._commit(writes)
            self._records[record.idempotency_key] = entry
            return True

    def write_transaction(self, writes: Sequence[TransactItem]) -> None:
        """Commit ``writes`` without a record (idempotency off, or no key)."""
        with self._lock:
            self._commit(writes)

    def outbox_item_key(self, owner_key: str | None, slot: str) -> dict[str, Any]:
        """Return the key of an outbox event's item, as the DynamoDB store lays it out."""
        return {"id": {"S": item_key(owner_key, slot)}}

    def outbox_put(
        self, event: OutboxEvent, key: Mapping[str, Any], key_prefix: str | None
    ) -> TransactItem:
        """Return the write of an outbox event: it commits into `committed_writes` like any.

        `outbox_events` reads them back.
        """
        with self._lock:
            self._emitted[key["id"]["S"]] = event
        return {"Put": {"TableName": OUTBOX_TABLE, "Item": dict(key)}}

    @property
    def outbox_events(self) -> list[OutboxEvent]:
        """Return the outbox events committed so far, in commit order (for unit tests)."""
        with self._lock:
            return [
                self._emitted[write["Put"]["Item"]["id"]["S"]]
                for write in self.committed_writes
                if "Put" in write and write["Put"].get("TableName") == OUTBOX_TABLE
            ]

    def release(self, idempotency_key: str, owner: str) -> bool:
        """Delete the caller's IN_PROGRESS record, if it still owns it."""
        with self._lock:
            if not self._owned(idempotency_key, owner):
                return False
            del self._records[idempotency_key]
            return True

    def get(self, idempotency_key: str) -> IdempotencyRecord | None:
        """Return the record for ``idempotency_key``, or None."""
        with self._lock:
            return self._read(idempotency_key)

    def get_many(self, idempotency_keys: Sequence[str]) -> dict[str, IdempotencyRecord]:
        """Return the records of ``idempotency_keys`` that exist, by key (one lock hold)."""
        with self._lock:
            found = {key: self._read(key) for key in idempotency_keys}
        return {key: record for key, record in found.items() if record is not None}

    def clear(self) -> None:
        """Forget every record and committed write (handy between tests)."""
        with self._lock:
            self._records.clear()
            self.committed_writes.clear()
            self._emitted.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def _commit(self, writes: Sequence[TransactItem]) -> None:
        if len(writes) > MAX_TRANSACTION_WRITES:
            raise IdempotencyTransactionError(
                f"{len(writes)} business writes; a transaction holds {MAX_TRANSACTION_WRITES}"
            )
        if self._apply_writes is not None:
            self._apply_writes(tuple(writes))
        self.committed_writes.extend(writes)

    def _owned(self, key: str, owner: str | None) -> bool:
        entry = self._records.get(key)
        return (
            entry is not None and entry[0].status is Status.IN_PROGRESS and entry[0].owner == owner
        )

    def _read(self, key: str) -> IdempotencyRecord | None:
        entry = self._records.get(key)
        if entry is None:
            return None
        record, stored = entry
        if stored is None:
            return record
        return replace(record, response_data=decode_stored_data(stored))

    def _entry(self, record: IdempotencyRecord) -> tuple[IdempotencyRecord, bytes | None]:
        """Return what is kept for ``record``: itself, or without its data plus the zlib bytes.

        Encoding also enforces DynamoDB's size limit, so a result too large there fails here.
        """
        if record.response_data is None:
            return record, None
        stored = encode_stored_data(record.response_data, compression_threshold=self._threshold)
        if isinstance(stored, str):
            return record, None
        return replace(record, response_data=None), stored
