"""The sweeper: publish the outbox events no stream record brought, found by age in an index.

A stream keeps its records for 24 hours; a mapping stuck longer, or a stream switched off,
leaves items that no record will ever bring to the publisher. Every item carries
``outbox_pending`` until its mark, so the sparse index on it holds the unpublished items only:
reading a bounded page of it per run costs the same whatever the table holds.
"""

from __future__ import annotations

import logging
from typing import Any

from idempotent_lambda.exceptions import IdempotencyConfigError
from idempotent_lambda.outbox._publisher import Publisher, _deadline

logger = logging.getLogger("idempotent_lambda.outbox")

#: The most index entries one run reads per partition (a ``Query`` returns at most 1 MB anyway).
MAX_LIMIT = 1000


class Sweeper:
    """The handler `idempotent_lambda.outbox.sweep_handler` returns; call it on a schedule."""

    def __init__(
        self, publisher: Publisher, *, min_age_seconds: int, limit: int, index_name: str
    ) -> None:
        if isinstance(min_age_seconds, bool) or not isinstance(min_age_seconds, int):
            raise IdempotencyConfigError("min_age_seconds must be a whole number of seconds")
        if min_age_seconds < 0:
            raise IdempotencyConfigError("min_age_seconds must not be negative")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise IdempotencyConfigError(f"limit must be a whole number from 1 to {MAX_LIMIT}")
        if not isinstance(index_name, str) or not index_name:
            raise IdempotencyConfigError("index_name must be a non-empty string")
        self.publisher = publisher
        self.min_age_ms = min_age_seconds * 1000
        self.limit = limit
        self.index_name = index_name

    def __call__(self, event: Any = None, context: Any = None) -> dict[str, Any]:
        """Publish the unpublished events older than the minimum age; return the run's counts.

        Raises:
            IdempotencyPersistenceLayerError: The index could not be read (missing, denied):
                the invocation fails, so the function's error metric shows it.
        """
        store = self.publisher.store
        found = store.outbox_pending_keys(self.index_name, self.publisher.key_prefixes, self.limit)
        now_ms = store.clock.now_ms()
        due = [key for key, emitted in found if emitted <= now_ms - self.min_age_ms]
        oldest_ms = found[0][1] if found else now_ms  # nothing waits: the age is 0
        failed = self.publisher.publish_keys(due, _deadline(context), oldest_ms)
        if due:
            logger.warning(
                "outbox sweep: %d unpublished events older than %d s were published "
                "from the index (%d failed); the stream did not bring them",
                len(due) - len(failed),
                self.min_age_ms // 1000,
                len(failed),
            )
        return {
            "found": len(found),
            "due": len(due),
            "failed": len(failed),
            "oldest_age_seconds": max(0, now_ms - oldest_ms) // 1000,
        }
