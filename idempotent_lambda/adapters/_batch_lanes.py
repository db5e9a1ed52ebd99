"""How a batch runs: its records in lanes, side by side, and which of them are reported.

A *lane* is a list of record indexes that must run in order: the records of one chain (a FIFO
message group, a stream item) together with every record that shares an idempotency key with
one of them, so that a duplicate runs after the record it duplicates and replays its result
instead of meeting its claim in progress. Up to ``workers`` lanes run at once: in a thread pool
for ``def`` handlers (each thread in a copy of the caller's context, so the batch's Lambda
context stays bound), as asyncio tasks for ``async def`` ones.

`BatchProgress` decides what is reported. Before a record starts, the Lambda context must have
at least the safety margin left and the record's chain must not have failed. A failed record is
reported and breaks its chain: the rest of it is reported without running, while other chains
go on. On a checkpointed source (a stream) every record from the first one not done on is
reported, since Lambda resumes from there. The outcome depends only on which records fail,
never on how lanes interleave, so it is the same whatever ``max_concurrency`` is.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
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


@dataclass
class BatchProgress:
    """The outcome of each record of one batch, and whether (and why) the batch stopped.

    Safe to use from the lanes' threads: each record's outcome is written by the one lane that
    runs it (and a chain lives in one lane), and stopping is guarded by a lock.

    Attributes:
        source: Source name in log lines.
        identifiers: Each record's ``itemIdentifier``.
        chains: Each record's chain (None: independent).
        checkpoint: Report every record from the first one not done on.
        lease_context: The Lambda context whose remaining time is the budget.
        margin_ms: No record starts with less time than this left.
    """

    source: str
    identifiers: list[str]
    chains: Sequence[Hashable | None]
    checkpoint: bool
    lease_context: LambdaContextLike | None
    margin_ms: int
    outcomes: list[str] = field(init=False)
    _broken: set[Hashable] = field(default_factory=set, init=False)
    _stopped: str | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        self.outcomes = [_NOT_RUN] * len(self.identifiers)

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


def plan_lanes(chains: Sequence[Hashable | None], keys: Sequence[str | None]) -> list[list[int]]:
    """Group record indexes into lanes: records that share a chain or a key end up together.

    Args:
        chains: Each record's chain (None: independent).
        keys: Each record's idempotency key (None: none known).

    Returns:
        The lanes, each in batch order, ordered by their first record.
    """
    parent = list(range(len(chains)))

    def root(index: int) -> int:
        while parent[index] != index:
            parent[index] = parent[parent[index]]
            index = parent[index]
        return index

    first: dict[tuple[int, Hashable], int] = {}
    for index, ties in enumerate(zip(chains, keys, strict=True)):
        for kind, tie in enumerate(ties):
            if tie is None:
                continue
            seen = first.setdefault((kind, tie), index)
            if seen != index:
                parent[root(index)] = root(seen)
    lanes: dict[int, list[int]] = {}
    for index in range(len(chains)):
        lanes.setdefault(root(index), []).append(index)
    return list(lanes.values())


def run_lanes(
    lanes: list[list[int]], pool: Executor | None, run_record: Callable[[int], None]
) -> None:
    """Call ``run_record`` on every index, lane by lane, lanes side by side in ``pool``.

    ``pool`` None, or a single lane, runs here, one lane after the other.
    """
    if pool is None or len(lanes) <= 1:
        for lane in lanes:
            _run_lane(lane, run_record)
        return
    futures = [
        pool.submit(contextvars.copy_context().run, _run_lane, lane, run_record) for lane in lanes
    ]
    for future in futures:
        future.result()


def _run_lane(lane: list[int], run_record: Callable[[int], None]) -> None:
    for index in lane:
        run_record(index)


async def run_lanes_async(
    lanes: list[list[int]], workers: int, run_record: Callable[[int], Awaitable[None]]
) -> None:
    """Await ``run_record`` on every index, lane by lane, up to ``workers`` lanes at once."""
    workers = min(workers, len(lanes))
    if workers <= 1:
        for lane in lanes:
            await _run_lane_async(lane, run_record)
        return
    slots = asyncio.Semaphore(workers)

    async def lane_task(lane: list[int]) -> None:
        async with slots:
            await _run_lane_async(lane, run_record)

    await asyncio.gather(*(lane_task(lane) for lane in lanes))


async def _run_lane_async(lane: list[int], run_record: Callable[[int], Awaitable[None]]) -> None:
    for index in lane:
        await run_record(index)


def run_coroutine(coroutine: Awaitable[None]) -> None:
    """Run ``coroutine`` to completion from synchronous code, even under a running loop."""

    async def main() -> None:
        await coroutine

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(main())
        return
    # Called from inside an event loop (a test, a local runner): run in a fresh loop elsewhere.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="idempotent-batch-loop") as pool:
        pool.submit(contextvars.copy_context().run, asyncio.run, main()).result()
