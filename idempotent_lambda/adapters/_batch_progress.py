"""The partial-batch rules: which records may start, which are reported for Lambda to retry.

Every record starts as not processed. Before one starts, the batch must not have stopped for the
time budget (the Lambda context must have at least the safety margin left) and the record's
chain (FIFO message group, stream item) must not have failed. A failed record is reported, and
breaks its chain: the rest of that chain is reported without running, while other chains go on.
On a checkpointed source (a stream) Lambda resumes from the lowest failed record, so every
record from the first failure or unprocessed record on is reported. The answer lists each
reported record once, in batch order: ``{"batchItemFailures": [{"itemIdentifier": ...}]}``.
The outcome depends only on which records fail, never on how lanes interleave, so it is the same
whatever ``max_concurrency`` is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, TypedDict

from idempotent_lambda._lambda_context import LambdaContextLike, remaining_ms

logger = logging.getLogger("idempotent_lambda.batch")

_NOT_RUN = "NOT_RUN"
_OK = "OK"


class BatchItemFailure(TypedDict):
    """One record for Lambda to retry."""

    itemIdentifier: str


class PartialBatchResponse(TypedDict):
    """What a batch handler returns (needs ``ReportBatchItemFailures`` on the mapping)."""

    batchItemFailures: list[BatchItemFailure]


def partial_response(identifiers: Sequence[str]) -> PartialBatchResponse:
    """Return the answer that asks Lambda to retry ``identifiers``."""
    return {"batchItemFailures": [{"itemIdentifier": i} for i in identifiers]}


def unique(identifiers: Iterable[str]) -> list[str]:
    """Return ``identifiers`` without repeats, first occurrence first."""
    return list(dict.fromkeys(identifiers))


class BatchProgress:
    """The outcome of each record of one batch, and whether (and why) the batch stopped.

    Safe to use from the lanes' threads: each record's outcome is written by the one lane that
    runs it (and a chain lives in one lane), and stopping is guarded by a lock.

    Args:
        source: Source name in log lines.
        identifiers: Each record's ``itemIdentifier``.
        chains: Each record's chain (None: independent).
        checkpoint: Report every record from the first one not done on.
        lease_context: The Lambda context whose remaining time is the budget.
        margin_ms: No record starts with less time than this left.
    """

    def __init__(
        self,
        source: str,
        identifiers: list[str],
        chains: Sequence[Hashable | None],
        *,
        checkpoint: bool,
        lease_context: LambdaContextLike | None,
        margin_ms: int,
    ) -> None:
        self.source = source
        self.identifiers = identifiers
        self.chains = chains
        self.checkpoint = checkpoint
        self.lease_context = lease_context
        self.margin_ms = margin_ms
        self.outcomes: list[str] = [_NOT_RUN] * len(identifiers)
        self._broken: set[Hashable] = set()
        self._stopped: str | None = None
        self._lock = threading.Lock()

    def may_start(self, index: int) -> bool:
        """Tell whether record ``index`` may start; if not, mark it not processed."""
        reason = self._stopped
        if reason is None and self.chains[index] in self._broken:
            reason = "after_failure"
        if reason is None:
            left = remaining_ms(self.lease_context)
            if left is not None and left < self.margin_ms:
                reason = self._stop(
                    "time_budget", f"{left} ms left, below the {self.margin_ms} ms margin"
                )
        if reason is None:
            return True
        self.outcomes[index] = reason
        logger.info(
            "batch record not processed: source=%s id=%s reason=%s",
            self.source,
            self.identifiers[index],
            reason,
            extra={"idempotency_batch": self._fields(index, reason=reason)},
        )
        return False

    def finish(self, index: int, error: BaseException | None) -> None:
        """Record how record ``index`` ended: done (``error`` None) or failed."""
        if error is None:
            self.outcomes[index] = _OK
            return
        self.outcomes[index] = type(error).__name__
        logger.warning(
            "batch record failed: source=%s id=%s error=%s",
            self.source,
            self.identifiers[index],
            type(error).__name__,
            extra={"idempotency_batch": self._fields(index, error=type(error).__name__)},
        )
        # Only the type: an exception's arguments (and so its traceback text) may hold payload
        # values, and logs must never carry them.
        chain = self.chains[index]
        if chain is not None:
            self._broken.add(chain)  # only this record's lane reads or writes its chain

    def failed_identifiers(self) -> list[str]:
        """Return the identifiers of the records to retry, once each, in batch order."""
        reported = [outcome != _OK for outcome in self.outcomes]
        if self.checkpoint and any(reported):
            first = reported.index(True)
            reported[first:] = [True] * (len(reported) - first)
        return unique(
            identifier
            for identifier, report in zip(self.identifiers, reported, strict=True)
            if report
        )

    def _stop(self, reason: str, why: str) -> str:
        with self._lock:
            if self._stopped is None:
                self._stopped = reason
                left = sum(1 for outcome in self.outcomes if outcome == _NOT_RUN)
                logger.warning(
                    "batch stopped: source=%s reason=%s (%s); records left: %d",
                    self.source,
                    reason,
                    why,
                    left,
                )
            return self._stopped

    def _fields(self, index: int, **extra: str) -> dict[str, Any]:
        return {"source": self.source, "id": self.identifiers[index], **extra}
