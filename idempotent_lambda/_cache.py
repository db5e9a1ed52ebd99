"""Per-function, per-process LRU of completed records."""

from __future__ import annotations

import threading
from collections import OrderedDict

from idempotent_lambda.record import IdempotencyRecord, Status


class LocalCache:
    """A thread-safe LRU of COMPLETED records; expired records are dropped when read."""

    def __init__(self, max_items: int) -> None:
        self._max_items = max_items
        self._items: OrderedDict[str, IdempotencyRecord] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, now_ms: int) -> IdempotencyRecord | None:
        """Return the cached record for ``key`` unless it is absent or expired."""
        with self._lock:
            record = self._items.get(key)
            if record is None:
                return None
            if record.expired_at(now_ms):
                del self._items[key]
                return None
            self._items.move_to_end(key)
            return record

    def put(self, record: IdempotencyRecord) -> None:
        """Remember a COMPLETED record, evicting the least recently used beyond capacity."""
        if record.status is not Status.COMPLETED:
            return
        with self._lock:
            self._items[record.idempotency_key] = record
            self._items.move_to_end(record.idempotency_key)
            while len(self._items) > self._max_items:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
