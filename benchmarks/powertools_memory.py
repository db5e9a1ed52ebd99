"""A minimal in-memory `BasePersistenceLayer` for Powertools, so both libraries run on a dict.

It follows the contract of Powertools' own `DynamoDBPersistenceLayer` (3.x):

- ``_put_record`` writes unless a live record holds the key (not expired, and not an IN_PROGRESS
  record whose in-progress expiry has passed). When one does, it validates the payload against
  it, caches it and raises ``IdempotencyItemAlreadyExistsError(old_data_record=...)`` — what the
  DynamoDB layer does with ``ReturnValuesOnConditionCheckFailure=ALL_OLD``.
- ``_get_record`` raises ``IdempotencyItemNotFoundError`` when there is no record.
- ``_update_record`` sets data, expiry, status (and the validation hash when enabled).
- ``_delete_record`` removes the record.

Records are kept as plain dicts of attributes, the way a table would hold them, and a fresh
`DataRecord` is built on every read.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from aws_lambda_powertools.utilities.idempotency import BasePersistenceLayer
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import (
    STATUS_CONSTANTS,
    DataRecord,
)

_IN_PROGRESS = STATUS_CONSTANTS["INPROGRESS"]


class PowertoolsInMemoryPersistenceLayer(BasePersistenceLayer):
    """Powertools persistence layer backed by a dict guarded by a lock."""

    def __init__(self) -> None:
        super().__init__()
        self._items: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def _get_record(self, idempotency_key: str) -> DataRecord:
        with self._lock:
            item = self._items.get(idempotency_key)
        if item is None:
            raise IdempotencyItemNotFoundError
        return _to_record(item)

    def _put_record(self, data_record: DataRecord) -> None:
        now = time.time()
        item = {
            "idempotency_key": data_record.idempotency_key,
            "status": data_record.status,
            "expiry_timestamp": data_record.expiry_timestamp,
            "in_progress_expiry_timestamp": data_record.in_progress_expiry_timestamp,
            "payload_hash": data_record.payload_hash if self.payload_validation_enabled else "",
            "response_data": "",
        }
        with self._lock:
            existing = self._items.get(data_record.idempotency_key)
            if existing is None or _claimable(existing, now):
                self._items[data_record.idempotency_key] = item
                return
        old_data_record = _to_record(existing)
        self._validate_payload(data_payload=data_record, stored_data_record=old_data_record)
        self._save_to_cache(data_record=old_data_record)
        raise IdempotencyItemAlreadyExistsError(old_data_record=old_data_record)

    def _update_record(self, data_record: DataRecord) -> None:
        with self._lock:
            item = self._items.setdefault(
                data_record.idempotency_key,
                {"idempotency_key": data_record.idempotency_key},
            )
            item["response_data"] = data_record.response_data
            item["expiry_timestamp"] = data_record.expiry_timestamp
            item["status"] = data_record.status
            if self.payload_validation_enabled:
                item["payload_hash"] = data_record.payload_hash

    def _delete_record(self, data_record: DataRecord) -> None:
        with self._lock:
            self._items.pop(data_record.idempotency_key, None)


def _claimable(item: dict[str, Any], now: float) -> bool:
    """Mirror the DynamoDB layer's condition expression: expired, or a lapsed IN_PROGRESS."""
    expiry = item.get("expiry_timestamp")
    if expiry is not None and expiry < int(now):
        return True
    lease = item.get("in_progress_expiry_timestamp")
    return item.get("status") == _IN_PROGRESS and lease is not None and lease < int(now * 1000)


def _to_record(item: dict[str, Any]) -> DataRecord:
    return DataRecord(
        idempotency_key=item["idempotency_key"],
        status=item.get("status", ""),
        expiry_timestamp=item.get("expiry_timestamp"),
        in_progress_expiry_timestamp=item.get("in_progress_expiry_timestamp"),
        response_data=item.get("response_data", ""),
        payload_hash=item.get("payload_hash", ""),
    )
