"""Claim ahead, complete behind: one ordered lane at the cost of about three store round trips.

Run one record at a time, a lane of ``n`` records pays ``2n`` round trips one after the other
(claim, run, complete, then the next record). Neither has to wait on the chain:

- **Claim ahead.** Every record of the lane whose key is new to the lane claims in one
  parallel wave before the first body runs. A claim that meets a COMPLETED record replays it; one
  that meets a live IN_PROGRESS record fails that record, and with it the rest of its chain, as a
  claim made in turn would. A record whose key appeared earlier in the lane claims in turn, once
  the earlier record's completion is written, so it replays that result.
- **Complete behind.** A record's completion (without business writes) is written while the next
  record runs, grouped with other records' completions when it may be
  (`idempotent_lambda.adapters._batch_completions`). Whatever that write meets, the record
  counts as done (see `IdempotentFunction._complete`), so the next record never waits on it. A
  completion with business writes can fail the record: it is written before the next record
  starts.

Each record is still admitted by `BatchProgress.may_start` in lane order, so which bodies run and
which records are reported are exactly those of a lane run one record at a time. A claim taken
ahead for a record that does not run is released before the lane ends; if the release fails, the
claim's lease (the invocation's remaining time) ends and the next delivery takes the record over.
The claims a lane gives up are released together, in one request while their leases allow it
(`idempotent_lambda.adapters._batch_completions`).
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any

from idempotent_lambda._effects import RUN_BODY, Flow, Pause, StoreCall
from idempotent_lambda.adapters._batch_lanes import BatchProgress

__all__ = ["Behind", "RecordFlow", "WorkerPools", "give_up", "run_lane_pipelined", "settle"]


class WorkerPools:
    """A batch handler's threads, started on first use and kept for the next batches.

    A warm Lambda serves batch after batch: starting ``workers`` threads for each one would cost
    more CPU than the records themselves. Two pools, since a lane's thread waits on the store
    calls it hands out: with one pool, waiting lanes could hold every thread.
    """

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._lanes: ThreadPoolExecutor | None = None
        self._store_calls: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def lanes(self) -> Executor | None:
        """Return the pool lanes run in; None when only one lane runs at a time."""
        if self.workers <= 1:
            return None
        with self._lock:
            if self._lanes is None:
                self._lanes = ThreadPoolExecutor(self.workers, "idempotent-batch")
            return self._lanes

    def store_calls(self) -> Executor:
        """Return the pool that runs the claims taken ahead and the completions behind."""
        with self._lock:
            if self._store_calls is None:
                self._store_calls = ThreadPoolExecutor(self.workers, "idempotent-batch-store")
            return self._store_calls


class _NotRunError(Exception):
    """Thrown into a flow holding a claim for a record that will not run: it releases the claim."""


class RecordFlow:
    """One record's flow, carried out one effect at a time by its lane (see `run_sync`).

    Flows of one lane are suspended side by side, so each steps (and runs its body) in a
    context of its own: the Lambda context it binds, the transaction it opens and its trace
    span stay its own. Its store calls made ahead or behind run in a copy of that context, so
    a client's spans (botocore's) are children of the record's span.
    """

    def __init__(self, flow: Flow, body: Callable[[], Any]) -> None:
        self.flow = flow
        self.body = body
        self.context = contextvars.copy_context()
        self.effect: Any = None
        self.done = False
        self.error: Exception | None = None
        self._step(lambda: flow.send(None))

    def _step(self, step: Callable[[], Any]) -> None:
        try:
            self.effect = self.context.run(step)
        except StopIteration:
            self.done, self.effect = True, None
        except Exception as exc:
            self.done, self.effect, self.error = True, None, exc

    def answer(self, value: Any = None, error: BaseException | None = None) -> None:
        """Send an effect's result (or throw its error) into the flow; stop at the next effect."""
        if error is None:
            self._step(lambda: self.flow.send(value))
        else:
            self._step(lambda: self.flow.throw(error))

    def perform(self) -> None:
        """Carry out the pending effect in this thread."""
        effect = self.effect
        try:
            if effect is RUN_BODY:
                value = self.context.run(self.body)
            elif isinstance(effect, Pause):
                time.sleep(effect.seconds)
                value = None
            else:
                value = self.context.run(effect.function, *effect.args, **effect.kwargs)
        except Exception as exc:
            self.answer(error=exc)
            return
        self.answer(value)

    def run_until_behind(self) -> StoreCall | None:
        """Carry out effects until done, or until a completion that may be written behind."""
        while not self.done:
            effect = self.effect
            if isinstance(effect, StoreCall) and effect.behind:
                return effect
            self.perform()
        return None

    def finish(self) -> None:
        """Carry out every remaining effect."""
        while not self.done:
            self.perform()

    def abandon(self) -> StoreCall | None:
        """Give the record up before its body: release a claim it holds, or just close it.

        Returns:
            The release the flow stopped at, when it may be written with others' (answer it,
            then finish the flow, with `settle`); None when nothing is left to do.
        """
        if self.effect is RUN_BODY:
            self.answer(error=_NotRunError())
            effect = self.effect
            if isinstance(effect, StoreCall) and effect.lease_end_ms is not None:
                return effect
            self.finish()
        elif not self.done:
            self.context.run(self.flow.close)
            self.done = True
        return None


def _call(store_call: StoreCall) -> Any:
    return store_call.function(*store_call.args, **store_call.kwargs)


Behind = tuple[int, RecordFlow, "Future[Any]"]
"""A record's index, its flow, and its completion being written behind."""


def settle(flow: RecordFlow, future: Future[Any]) -> None:
    """Answer ``flow``'s pending completion with ``future``'s outcome and finish the flow."""
    try:
        value = future.result()
    except Exception as exc:
        flow.answer(error=exc)
    else:
        flow.answer(value)
    flow.finish()


def give_up(
    flows: list[RecordFlow],
    release_together: Callable[[list[tuple[RecordFlow, StoreCall]]], list[Future[Any]]] | None,
) -> None:
    """Abandon ``flows`` (records that will not run); their claims are released together when
    ``release_together`` is given (it starts the releases), one after the other otherwise."""
    held = [(flow, call) for flow in flows if (call := flow.abandon()) is not None]
    if release_together is None:
        for flow, _ in held:
            flow.finish()
        return
    for (flow, _), future in zip(held, release_together(held), strict=True):
        settle(flow, future)


def run_lane_pipelined(
    lane: list[int],
    *,
    keys: list[str | None],
    start: Callable[[int], RecordFlow],
    failure: Callable[[int, Exception | None], BaseException | None],
    progress: BatchProgress,
    pool: Executor,
    write_behind: Callable[[StoreCall], Future[Any]] | None = None,
    left_behind: list[Behind] | None = None,
    release_together: Callable[[list[tuple[RecordFlow, StoreCall]]], list[Future[Any]]]
    | None = None,
) -> None:
    """Run one lane's records in order, their claims ahead and their completions behind.

    Args:
        lane: Record indexes, in the order they must run.
        keys: Each record's idempotency key (None: none known, it claims in turn).
        start: Index -> the record's flow, advanced to its first effect.
        failure: ``(index, error)`` -> what fails the record (None: it is done).
        progress: Admits each record and keeps its outcome.
        pool: Runs the store calls made ahead or behind.
        write_behind: Starts a completion written behind (default: a call in ``pool``, in the
            record's context).
        left_behind: Where the lane leaves the completions still being written when it ends,
            for the caller to settle (with `settle`, then ``progress.finish``); None: the lane
            waits for them itself.
        release_together: Starts the releases of the claims taken ahead for records that do
            not run, all at once (see `give_up`); None: one after the other.
    """
    ahead: dict[int, RecordFlow] = {}
    seen: set[str] = set()
    for index in lane:
        key = keys[index]
        if key is not None and key not in seen:
            seen.add(key)
            ahead[index] = start(index)
    claims = {i: f for i, f in ahead.items() if isinstance(f.effect, StoreCall)}
    futures = {i: pool.submit(f.context.copy().run, _call, f.effect) for i, f in claims.items()}
    for index, future in futures.items():
        try:
            claims[index].answer(future.result())
        except Exception as exc:
            claims[index].answer(error=exc)

    behind: list[Behind] = []
    not_run: list[RecordFlow] = []

    def settle_behind() -> None:
        for index, flow, future in behind:
            settle(flow, future)
            progress.finish(index, failure(index, flow.error))
        behind.clear()

    try:
        for index in lane:
            flow = ahead.pop(index, None)
            if not progress.may_start(index):
                if flow is not None:
                    not_run.append(flow)
                continue
            if flow is None:
                # A repeated key claims once the earlier result is written, or its claim deleted.
                settle_behind()
                give_up(not_run, release_together)
                not_run.clear()
                flow = start(index)
            completion = flow.run_until_behind()
            if completion is not None:
                call = (
                    pool.submit(flow.context.copy().run, _call, completion)
                    if write_behind is None
                    else flow.context.run(write_behind, completion)
                )
                behind.append((index, flow, call))
                continue
            progress.finish(index, failure(index, flow.error))
    finally:
        give_up([*not_run, *ahead.values()], release_together)
        if left_behind is None:
            settle_behind()
        else:
            left_behind.extend(behind)
