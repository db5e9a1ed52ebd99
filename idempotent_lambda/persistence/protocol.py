"""The store Protocol every persistence layer implements, and the rules they share."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from idempotent_lambda._clock import Clock
from idempotent_lambda._limits import bounded_inflate
from idempotent_lambda._record_format import (  # re-exported for the stores
    MAX_STORED_DATA_BYTES as MAX_STORED_DATA_BYTES,  # noqa: PLC0414
)
from idempotent_lambda._record_format import (  # re-exported for the stores' Powertools layouts
    POWERTOOLS_IN_PROGRESS as POWERTOOLS_IN_PROGRESS,  # noqa: PLC0414
)
from idempotent_lambda.exceptions import (
    IdempotencyTransactionError,
    IdempotencyUnstorableResultError,
)
from idempotent_lambda.record import IdempotencyRecord, Status

if TYPE_CHECKING:
    from idempotent_lambda._outbox_format import OutboxEvent
    from idempotent_lambda.exceptions import IdempotencyError

#: Results larger than this (UTF-8 bytes) are stored zlib-compressed in a Binary attribute.
DEFAULT_COMPRESSION_THRESHOLD_BYTES = 4 * 1024
#: DynamoDB's ``TransactWriteItems`` takes at most 100 items; one is the idempotency record.
MAX_TRANSACTION_WRITES = 99

TransactItem = Mapping[str, Any]
"""One business write in DynamoDB's low-level form: ``{"Put": {"TableName": ..., "Item": ...}}``."""


class ClaimOutcome(NamedTuple):
    """What a claim did (a named tuple: built on every claim, so it is the cheapest immutable).

    Attributes:
        claimed: True when this claim now owns the key.
        previous: The record that was there: the one that blocked the claim when ``claimed`` is
            False, or the expired/abandoned one that was replaced when it is True.
    """

    claimed: bool
    previous: IdempotencyRecord | None


@runtime_checkable
class PersistenceStore(Protocol):
    """A place to keep idempotency records, with the conditional writes the lifecycle needs.

    Every method is one round trip to the backing store at most.
    """

    clock: Clock

    def claim(
        self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int
    ) -> ClaimOutcome:
        """Write ``record`` (IN_PROGRESS) unless a live record holds its key.

        The write succeeds when there is no record, when the record's expiration (epoch seconds)
        is before ``now_ms // 1000``, or when it is IN_PROGRESS with a lease that ended before
        ``lease_cutoff_ms``. Otherwise nothing is written and the blocking record is returned.
        """
        ...

    def complete(self, record: IdempotencyRecord) -> bool:
        """Replace the caller's IN_PROGRESS record with ``record`` (COMPLETED).

        Conditional on the stored record being IN_PROGRESS and owned by ``record.owner``.

        Returns:
            False when the condition failed: the caller's lease was taken over.

        Raises:
            IdempotencyUnstorableResultError: The result does not fit in an item.
        """
        ...

    def release(self, idempotency_key: str, owner: str) -> bool:
        """Delete the caller's IN_PROGRESS record so the next attempt runs again.

        Returns:
            False when the record is no longer IN_PROGRESS under ``owner``.
        """
        ...

    def get(self, idempotency_key: str) -> IdempotencyRecord | None:
        """Read a record with strong consistency; None when there is none."""
        ...


@runtime_checkable
class TransactionalStore(PersistenceStore, Protocol):
    """A store that can commit business writes atomically with the COMPLETED record.

    The optional capability behind `idempotent_lambda.transaction.current_transaction`.
    """

    def complete_with(self, record: IdempotencyRecord, writes: Sequence[TransactItem]) -> bool:
        """Complete ``record`` and apply ``writes`` in one atomic step: all of them, or none.

        The record's write is conditional as in `PersistenceStore.complete`.

        Returns:
            False when that condition failed (the lease was taken over): nothing was written.

        Raises:
            IdempotencyTransactionConflictError: A business write's condition failed.
            IdempotencyTransactionError: The writes are invalid.
            IdempotencyUnstorableResultError: The result does not fit in an item.
        """
        ...

    def write_transaction(self, writes: Sequence[TransactItem]) -> None:
        """Apply ``writes`` atomically, without a record (idempotency off or no key).

        Raises:
            IdempotencyTransactionConflictError: A write's condition failed.
            IdempotencyTransactionError: The writes are invalid.
        """
        ...


@runtime_checkable
class BatchReadStore(PersistenceStore, Protocol):
    """A store that reads many records in one round trip (the optional capability batches use).

    A batch handler reads every record's key this way before it claims any: a redelivered batch
    then replays its COMPLETED records from this one read instead of a claim each.
    """

    def get_many(self, idempotency_keys: Sequence[str]) -> dict[str, IdempotencyRecord]:
        """Read the records of ``idempotency_keys`` with strong consistency, as `get` would.

        Returns:
            The records found, by key. A key may be missing because it has no record or
            because the store could not read it in time (throttled, say): callers treat a
            missing key as unknown, never as proof that no record exists.
        """
        ...


@runtime_checkable
class BatchCompleteStore(PersistenceStore, Protocol):
    """A store that writes many COMPLETED records in one request, without a condition.

    The optional capability behind a batch's completions (DESIGN §13): a batch handler writes a
    record's completion this way only while the record's lease has more than the clock-skew
    tolerance plus `unconditional_write_ms` left, since until then no other invocation can have
    taken the key over and the owner condition of `PersistenceStore.complete` cannot fail.
    """

    def unconditional_write_ms(self) -> int | None:
        """Return the longest one `put_completed` or `delete_claims` request may take, retries
        included.

        None: this store does not write completions unconditionally now.
        """
        ...

    def put_completed(
        self, records: Sequence[IdempotencyRecord], *, send_by_ms: int | None = None
    ) -> list[IdempotencyRecord]:
        """Write ``records`` (COMPLETED, distinct keys, at most 25) unconditionally, in one request.

        Each item is exactly the one `PersistenceStore.complete` would write for its record.
        ``send_by_ms``: the request is sent only if the store's clock reads less than this once
        the items are ready (an S3 offload of a large result takes time); else none is sent.

        Returns:
            The records left unwritten (throttled, say, or not sent in time).

        Raises:
            IdempotencyPersistenceLayerError: The request failed; any of the records may or may
                not be written.
        """
        ...

    def delete_claims(
        self, idempotency_keys: Sequence[str], *, send_by_ms: int | None = None
    ) -> list[str]:
        """Delete the records of ``idempotency_keys`` (at most 25) unconditionally, in one request.

        Only for claims of this invocation whose leases allow it, as for `put_completed`;
        ``send_by_ms`` as there.

        Returns:
            The keys left undeleted.

        Raises:
            IdempotencyPersistenceLayerError: The request failed; any of the records may or may
                not be deleted.
        """
        ...


@runtime_checkable
class FormatViewStore(PersistenceStore, Protocol):
    """A store that maps records onto a shared layout, one view per record format.

    DynamoDB and Redis items can be laid out as Powertools writes them or natively; the engine
    takes the view of its config's format once (`store_for_format`).
    """

    def with_record_format(self, record_format: str) -> PersistenceStore:
        """Return a store on the same table and client that maps records onto that format.

        Raises:
            IdempotencyConfigError: The format is unknown.
        """
        ...


@runtime_checkable
class OutboxStore(TransactionalStore, Protocol):
    """A store that keeps outbox events with the records (`idempotent_lambda.outbox.emit`)."""

    def outbox_item_key(self, owner_key: str | None, slot: str) -> dict[str, Any]:
        """Return the primary key (low-level form) of the event item at ``slot`` of ``owner_key``.

        ``owner_key`` is the record's key, or the function's key prefix for a body run without
        a record.
        """
        ...

    def outbox_put(
        self, event: OutboxEvent, key: Mapping[str, Any], key_prefix: str | None
    ) -> TransactItem:
        """Return the write of ``event``'s item at ``key``, to commit in its body's transaction.

        An item, published or not, is never overwritten.
        """
        ...


@runtime_checkable
class OutboxReader(Protocol):
    """A store the outbox publisher and sweeper read events from, and mark them published in.

    The store maps its items onto events: the publisher never sees an item.
    """

    clock: Clock

    def outbox_key(self, keys: Mapping[str, Any]) -> dict[str, Any] | None:
        """Return the primary key in ``keys`` (a stream record's, or an item) if it is an
        outbox item's; else None."""
        ...

    def outbox_partition(self, key: Mapping[str, Any]) -> str:
        """Return the partition value of an outbox item's ``key``."""
        ...

    def outbox_items(
        self, keys: Sequence[Mapping[str, Any]]
    ) -> tuple[dict[str, OutboxEvent], dict[str, IdempotencyError]]:
        """Read the events at ``keys`` as they are now; return them and each key's error.

        Both are keyed by the key's identity (`idempotent_lambda.outbox` compares keys so); a
        key with no item is in neither.
        """
        ...

    def outbox_mark_published(self, key: Mapping[str, Any], published_at_ms: int) -> bool:
        """Record the event at ``key`` as published; False when it was already, or is gone."""
        ...

    def outbox_pending_keys(
        self, index_name: str, key_prefixes: Sequence[str] | None, limit: int
    ) -> list[tuple[dict[str, Any], int]]:
        """Return unpublished items' keys and emit times from the index, oldest first."""
        ...


def transactional(store: object) -> TransactionalStore:
    """Return ``store`` as a `TransactionalStore`, or raise `IdempotencyTransactionError`."""
    if not isinstance(store, TransactionalStore):
        raise IdempotencyTransactionError(
            f"{type(store).__name__} cannot commit business writes with the record"
        )
    return store


def store_for_format(store: PersistenceStore, record_format: str) -> PersistenceStore:
    """Return the view of ``store`` that reads and writes records in ``record_format``.

    A `FormatViewStore` (DynamoDB, Redis) gives its view of that format. Any other store keeps
    records as it is given them (in memory, or a custom store), so every format is the same to
    it: it is returned as is.
    """
    if record_format == "native" or not isinstance(store, FormatViewStore):
        return store
    return store.with_record_format(record_format)


def claim_allowed(existing: IdempotencyRecord | None, *, now_ms: int, lease_cutoff_ms: int) -> bool:
    """Decide a claim the way the DynamoDB condition expression does (the reference rule)."""
    if existing is None or existing.expired_at(now_ms):
        return True
    return (
        existing.status is Status.IN_PROGRESS
        and existing.in_progress_expiry_timestamp is not None
        and existing.in_progress_expiry_timestamp < lease_cutoff_ms
    )


def encode_stored_data(
    data: str, *, compression_threshold: int = DEFAULT_COMPRESSION_THRESHOLD_BYTES
) -> str | bytes:
    """Return the form a result is stored in: the text, or its zlib bytes.

    The one size rule of every store. The text is kept when it is no larger than
    ``compression_threshold`` and fits `MAX_STORED_DATA_BYTES`; otherwise it is compressed,
    whatever the threshold, since compressing is the only way such a result can be stored.

    Raises:
        IdempotencyUnstorableResultError: Still larger than `MAX_STORED_DATA_BYTES` compressed.
    """
    raw = data.encode("utf-8", "surrogatepass")
    if len(raw) <= compression_threshold and len(raw) <= MAX_STORED_DATA_BYTES:
        return data
    packed = zlib.compress(raw, 6)
    if len(packed) > MAX_STORED_DATA_BYTES:
        raise IdempotencyUnstorableResultError(
            f"result is {len(packed)} bytes after zlib compression; "
            f"an item holds at most {MAX_STORED_DATA_BYTES}"
        )
    return packed


def decode_stored_data(stored: str | bytes) -> str:
    """Invert `encode_stored_data`."""
    if isinstance(stored, str):
        return stored
    return bounded_inflate(stored).decode("utf-8", "surrogatepass")
