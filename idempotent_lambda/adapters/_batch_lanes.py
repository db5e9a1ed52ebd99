"""Concurrency of a batch: lanes run side by side, the records of one lane in order.

A *lane* is a list of record indexes that must run in order: the records of one chain (a FIFO
message group, a stream item) together with every record that shares an idempotency key with
one of them, so that a duplicate runs after the record it duplicates and replays its result
instead of meeting its claim in progress. A record tied to nothing is a lane of its own. Up to
``workers`` lanes run at once: in a thread pool for ``def`` handlers, as asyncio tasks for
``async def`` ones. Each thread runs in a copy of the caller's context, so the batch's Lambda
context stays bound.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Hashable, Sequence


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


def run_lanes(lanes: list[list[int]], workers: int, run_record: Callable[[int], None]) -> None:
    """Call ``run_record`` on every index, lane by lane, up to ``workers`` lanes at once."""
    workers = min(workers, len(lanes))
    if workers <= 1:
        for lane in lanes:
            _run_lane(lane, run_record)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers, thread_name_prefix="idempotent-batch") as pool:
        futures = [
            pool.submit(contextvars.copy_context().run, _run_lane, lane, run_record)
            for lane in lanes
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
