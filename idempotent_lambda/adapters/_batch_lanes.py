"""How a batch runs: its records in lanes, side by side, and which of them are reported.

A *lane* is a list of record indexes that must run in order: the records of one chain (a FIFO
message group, a stream item) together with every record that shares an idempotency key with
one of them, so that a duplicate runs after the record it duplicates and replays its result
instead of meeting its claim in progress. Up to ``workers`` lanes run at once, and a lane runs
one of two ways:

- **Sequential** (``async def`` handlers): each record is one call of the engine, awaited before
  the next; lanes are asyncio tasks.
- **Pipelined** (``def`` handlers, `run_lane`): every record of the lane whose key is new to it
  claims ahead, in parallel, while the first record runs; a record's completion is written
  behind (`idempotent_lambda.adapters._batch_completions`) while the next one runs; a record
  whose key appeared earlier in the lane claims in turn, once the earlier completions are
  written, so it replays that result. Lanes run in threads, each in a copy of the caller's
  context, so the batch's Lambda context stays bound.

`BatchProgress` decides what is reported. Before a record starts, the Lambda context must have
at least the safety margin left and the record's chain must not have failed. A failed record is
reported and breaks its chain: the rest of it is reported without running, while other chains
go on. On a checkpointed source (a stream) every record from the first one not done on is
reported, since Lambda resumes from there. The outcome depends only on which records fail,
never on how lanes interleave or which way they run, so it is the same whatever
``max_concurrency`` is. A claim taken ahead for a record that does not run is released before
the lane ends, with the others the lane gives up (in one request while their leases allow it);
if that fails, its lease (the invocation's remaining time) ends and the next delivery takes the
record over.

The two ways a lane runs stay in this one module, past the package's usual size, because they
share `BatchProgress` and the rules above: reading them side by side is how one checks that they
report the same records.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any, TypedDict

from idempotent_lambda._effects import StoreCall
from idempotent_lambda._lambda_context import LambdaContextLike, remaining_ms
from idempotent_lambda.adapters._batch_completions import CompletionWriter, RecordFlow, WorkerPools

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
    lanes: list[list[int]], pool: Executor | None, run_lane: Callable[[list[int]], None]
) -> None:
    """Call ``run_lane`` on every lane, side by side in ``pool`` (None: here, one by one)."""
    if pool is None or len(lanes) <= 1:
        for lane in lanes:
            run_lane(lane)
        return
    futures = [pool.submit(contextvars.copy_context().run, run_lane, lane) for lane in lanes]
    for future in futures:
        future.result()


Behind = tuple[int, RecordFlow, "Future[Any]"]
"""A record's index, its flow, and its completion being written behind."""


def give_up(flows: list[RecordFlow], writer: CompletionWriter) -> None:
    """Abandon ``flows`` (records that will not run); their claims are released together."""
    held = [(flow, call) for flow in flows if (call := flow.abandon()) is not None]
    if not held:
        return
    futures = [flow.context.run(writer.submit, call, send=False) for flow, call in held]
    writer.send_queued()
    for (flow, _), future in zip(held, futures, strict=True):
        flow.settle(future)
        flow.finish()


def run_pipelined(
    lanes: list[list[int]],
    *,
    keys: Sequence[str | None],
    start: Callable[[int], RecordFlow],
    replays: Sequence[bool],
    progress: BatchProgress,
    pools: WorkerPools,
    writer: CompletionWriter,
) -> None:
    """Run lanes pipelined (`run_lane`), then settle every record they leave behind.

    A lane that makes no store call (each record replays from the batch read) runs first, here:
    threads would only add contention. The others run side by side in the lane pool.

    Args:
        lanes: Record indexes, each lane in the order its records must run.
        keys: Each record's idempotency key (None: none known).
        start: Index -> the record's flow, advanced to its first effect.
        replays: Each record replays from the batch read (no store call).
        progress: Admits each record and keeps its outcome.
        pools: The lanes' threads and those of the claims taken ahead.
        writer: Writes the completions behind.
    """
    store_calls = pools.store_calls()
    behind: list[Behind] = []

    def run(lane: list[int]) -> None:
        run_lane(
            lane,
            keys=keys,
            start=start,
            progress=progress,
            pool=store_calls,
            writer=writer,
            behind=behind,
        )

    here: list[list[int]] = []
    elsewhere: list[list[int]] = []
    for lane in lanes:
        (here if all(replays[index] for index in lane) else elsewhere).append(lane)
    try:
        run_lanes(here, None, run)
        run_lanes(elsewhere, pools.lanes(), run)
    finally:
        writer.flush()  # what is still queued: sent from here too, since we wait for it now
        settle_behind(behind, progress)


def run_lane(
    lane: list[int],
    *,
    keys: Sequence[str | None],
    start: Callable[[int], RecordFlow],
    progress: BatchProgress,
    pool: Executor,
    writer: CompletionWriter,
    behind: list[Behind],
) -> None:
    """Run one lane's records in order, pipelined: claims ahead, completions behind.

    Args:
        lane: Record indexes, in the order they must run.
        keys: Each record's idempotency key (None: none known, it claims in turn).
        start: Index -> the record's flow, advanced to its first effect.
        progress: Admits each record, and keeps the outcome of those not left ``behind``.
        pool: Runs the claims taken ahead.
        writer: Writes the completions behind, and releases the claims given up.
        behind: Where the lane leaves its records whose completion is still being written,
            for the batch to settle (`RecordFlow.settle`, then ``progress.finish``).
    """
    if not progress.may_start(lane[0]):  # the batch has stopped: no record of the lane starts
        for index in lane[1:]:
            progress.may_start(index)
        return
    ahead: dict[int, RecordFlow] = {}
    seen: set[str] = set()
    for index in lane:
        key = keys[index]
        if key is not None and key not in seen:
            seen.add(key)
            ahead[index] = start(index)
    wave = list(ahead.values())
    if len(wave) == 1:  # a lone claim is made here: no other thread to wait for
        if isinstance(wave[0].effect, StoreCall):
            wave[0].perform()
    else:
        for claimer in wave:
            claimer.send_ahead(pool)  # in batch order: one store thread makes them in order
        for claimer in wave:
            claimer.settle()
    mine: list[Behind] = []
    not_run: list[RecordFlow] = []
    try:
        for index in lane:
            flow = ahead.pop(index, None)
            if index != lane[0] and not progress.may_start(index):
                if flow is not None:
                    not_run.append(flow)
                continue
            if flow is None:
                # A repeated key claims once the earlier result is written, or its claim deleted.
                settle_behind(mine, progress)
                give_up(not_run, writer)
                not_run.clear()
                flow = start(index)
            completion = flow.run_until_behind()
            if completion is None:
                progress.finish(index, flow.failure())
            else:
                mine.append((index, flow, flow.context.run(writer.submit, completion)))
    finally:
        give_up([*not_run, *ahead.values()], writer)
        behind.extend(mine)


def settle_behind(behind: list[Behind], progress: BatchProgress) -> None:
    """Wait for the completions ``behind``, finish their flows and record the outcomes."""
    for index, flow, future in behind:
        flow.settle(future)
        flow.finish()
        progress.finish(index, flow.failure())
    behind.clear()


def run_sequential(
    lanes: list[list[int]],
    workers: int,
    progress: BatchProgress,
    run: Callable[[int], Awaitable[BaseException | None]],
) -> None:
    """Run lanes sequentially, up to ``workers`` at once, as asyncio tasks: each record is one
    awaited ``run`` (index -> what failed it), admitted by ``progress`` first."""

    async def run_record(index: int) -> None:
        if progress.may_start(index):
            progress.finish(index, await run(index))

    run_coroutine(run_lanes_async(lanes, workers, run_record))


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
