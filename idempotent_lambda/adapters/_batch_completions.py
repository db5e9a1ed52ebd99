"""Write-behind, the property of a pipelined lane: a record's completion is written while the
next record runs, and together with others', one ``BatchWriteItem`` for up to 25 records.

`RecordFlow` carries one record's flow out effect by effect, up to the completion it leaves
behind; `WorkerPools` holds the threads; `CompletionWriter` writes what is left behind.

A completion is a conditional write: the record is replaced only while it is still this
invocation's IN_PROGRESS claim. That condition can fail only once another invocation has taken
the key over, and none can before the claim's lease has ended: a claimer takes over a lease
only once it ended `CLOCK_SKEW_TOLERANCE_MS` ago on its own clock (Powertools, sharing the table,
once it ended on its clock), so while our clock reads less than the lease end minus the
tolerance, nobody can have taken it. A completion *sent* while the lease has more left than the
tolerance plus the longest the request can take (`BatchCompleteStore.unconditional_write_ms`:
every attempt and backoff the installed botocore makes for the client) is therefore applied
while the condition still holds, and may be written without it: with other records'
completions, 25 in one request (DESIGN §14). The store checks the time again once the items
are ready, right before it sends (an S3 offload of a large result runs in between). Past that
point, or on a store without the capability, the conditional write stays. Claims taken ahead
for records that do not run (a Kafka partition after a failed record) are deleted together the
same way.

`CompletionWriter` groups them as a commit log does: the first completion is sent at once, and
those that arrive while a request is out go together in the next one. No completion waits for
a timer or for the batch to end, so a record's completion is written at most one request later
than when it was written alone; and the group is as large as the records that finish meanwhile.
Once its records have run, the batch sends what is still queued itself (`flush`) rather than
wait for the request out to come back first.

What can go wrong, and what it costs:

- **DynamoDB leaves items unprocessed** (throttling): they are sent again after growing
  pauses, each time only while its lease still allows it; once it does not, the completion is
  the conditional ``PutItem`` (a release the conditional ``DeleteItem``). Nothing is dropped.
- **The request fails as a whole** (a result too large for an item, an outage, no
  ``dynamodb:BatchWriteItem`` permission): each of its records is written conditionally, one
  request each, exactly as without batching. Without the permission, batching stops for the
  handler (one warning).
- **The client's bound leaves no room** (a client with botocore's 60 s timeouts, adaptive retry
  mode): every completion is conditional, and the handler says so once, at WARNING.
- **The Lambda dies** after a body and before its completion is written: the record stays
  IN_PROGRESS, and its lease is the invocation's deadline, as for a Lambda that dies between a
  body and its conditional completion today. Lambda retries the batch (or the record); until
  the lease ends the record is reported, not run; then it is taken over and runs once more.
  Nothing is lost: the batch answer is sent only after every completion is settled.

The module is a little over the package's usual size because a record's flow (`RecordFlow`),
the threads it runs on (`WorkerPools`) and the writer that groups its completion
(`CompletionWriter`) hand a completion from one to the next; split, each would need the others'
internals.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, NamedTuple

from idempotent_lambda._claim import CLOCK_SKEW_TOLERANCE_MS
from idempotent_lambda._effects import RUN_BODY, Flow, Pause, StoreCall
from idempotent_lambda.persistence._aws import error_code
from idempotent_lambda.persistence.protocol import BatchCompleteStore, PersistenceStore
from idempotent_lambda.record import IdempotencyRecord

__all__ = ["CompletionWriter", "RecordFlow", "WorkerPools"]

logger = logging.getLogger("idempotent_lambda.batch")

#: Records per request (DynamoDB's ``BatchWriteItem`` limit).
GROUP = 25
#: Pause before the first retry of unprocessed items, growing twofold up to the longest.
BACKOFF_S, MAX_BACKOFF_S = 0.05, 1.0
#: Requests out at once, beyond the first, when full groups wait.
MAX_SENDERS = 4


class WorkerPools:
    """A batch handler's threads, started on first use and kept for the next batches.

    A warm Lambda serves batch after batch: starting ``workers`` threads for each one would cost
    more CPU than the records themselves. Two pools, since a lane's thread waits on the store
    calls it hands out (claims ahead, completions behind): with one pool, waiting lanes could
    hold every thread.
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


class _Pending(NamedTuple):
    kind: str  # "complete" or "release"
    call: StoreCall
    future: Future[Any]
    context: contextvars.Context  # the record's: its requests are counted there


class RecordFlow:
    """One record's flow, carried out one effect at a time by its lane.

    Flows of one lane are suspended side by side, so each steps (and runs its body) in a
    context of its own: the Lambda context it binds, the transaction it opens and its trace
    span stay its own. Its store calls made ahead or behind run in a copy of that context, so
    a client's spans (botocore's) are children of the record's span.
    """

    def __init__(
        self,
        flow: Flow,
        body: Callable[[], Any],
        failure: Callable[[Exception], BaseException | None],
    ) -> None:
        self.flow = flow
        self.body = body
        self._failure = failure
        self.context = contextvars.copy_context()
        self.effect: Any = None
        self.done = False
        self.error: Exception | None = None
        self.ahead: Future[Any] | None = None  # its first store call, sent ahead
        self._step(lambda: flow.send(None))

    def _step(self, step: Callable[[], Any]) -> None:
        try:
            self.effect = self.context.run(step)
        except StopIteration:
            self.done, self.effect = True, None
        except Exception as exc:
            self.done, self.effect, self.error = True, None, exc

    def failure(self) -> BaseException | None:
        """What fails the record once the flow is done (None: it is done)."""
        return None if self.error is None else self._failure(self.error)

    def answer(self, value: Any = None, error: BaseException | None = None) -> None:
        """Send an effect's result (or throw its error) into the flow; stop at the next effect."""
        if error is None:
            self._step(lambda: self.flow.send(value))
        else:
            self._step(lambda: self.flow.throw(error))

    def send_ahead(self, pool: Executor) -> None:
        """Start the pending store call (the claim) in ``pool``; `settle` answers it later."""
        if isinstance(self.effect, StoreCall):
            self.ahead = pool.submit(self.context.copy().run, _perform, self.effect)

    def settle(self, future: Future[Any] | None = None) -> None:
        """Answer the pending store call with ``future``'s outcome (default: the call sent
        ahead, if any), waiting for it."""
        future, self.ahead = future or self.ahead, None
        if future is None:
            return
        try:
            value = future.result()
        except Exception as exc:
            self.answer(error=exc)
        else:
            self.answer(value)

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
                value = self.context.run(_perform, effect)
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
            The release the flow stopped at, when it may be written with others' (`give_up`);
            None when nothing is left to do.
        """
        self.settle()
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


class _NotRunError(Exception):
    """Thrown into a flow holding a claim for a record that will not run: it releases the claim."""


class CompletionWriter:
    """Writes a batch handler's completions behind its records: grouped when it may.

    Args:
        store: The store view the batch and its engine share (`Entry.view`): its ``complete``
            is what a completion calls, its ``release`` what a release calls.
        pool: Runs the requests.
    """

    def __init__(self, store: PersistenceStore, pool: Callable[[], Executor]) -> None:
        self._store = store if isinstance(store, BatchCompleteStore) else None
        self._pool = pool
        self._lock = threading.Lock()
        self._queue: list[_Pending] = []
        self._senders = 0
        self._warned = False

    def submit(self, call: StoreCall, *, send: bool = True) -> Future[Any]:
        """Start writing ``call`` (a completion, or a release of a claim taken ahead) behind;
        its future holds what ``call`` returns.

        A call written alone runs in the caller's context (the record's), so its client span
        nests under the record's span; a group's request runs in its first record's context (its
        requests count there, and its client span nests there). ``send=False`` only
        queues a call that may be grouped: `send_queued` sends the queue.
        """
        context = contextvars.copy_context()
        kind = self._may_group(call)
        if kind is None:
            return self._pool().submit(context.run, _perform, call)
        future: Future[Any] = Future()
        with self._lock:
            self._queue.append(_Pending(kind, call, future, context))
        if send:
            self.send_queued()
        return future

    def send_queued(self) -> None:
        """Start a sender for what is queued, unless enough run already."""
        with self._lock:
            start = bool(self._queue) and (
                self._senders == 0 or (len(self._queue) >= GROUP and self._senders < MAX_SENDERS)
            )
            if start:
                self._senders += 1
        if start:
            self._pool().submit(self._send_all)

    def flush(self) -> None:
        """Send what is queued from this thread too: its caller is about to wait for it."""
        with self._lock:
            self._senders += 1
        self._send_all()

    def _may_group(self, call: StoreCall) -> str | None:
        """Return the kind of ``call`` when it may be queued for a grouped request now (None:
        it may not); warn once if the client's bound is what rules it out."""
        store = self._store
        kind = None if store is None else _kind(store, call)
        if store is None or call.lease_end_ms is None or kind is None:
            return None
        bound = store.unconditional_write_ms()
        if bound is not None and _send_by(call, bound) > store.clock.now_ms():
            self._warned = True  # grouping works for this handler: no warning later
            return kind
        if not self._warned:
            self._warned = True
            left_s = (call.lease_end_ms - store.clock.now_ms()) / 1000
            logger.warning(
                "batch completions: each completion is a conditional PutItem, since the "
                "DynamoDB client's longest request (%s, botocore's retries included) does not "
                "fit in the lease (%.0f s left, less %d ms of clock skew); give the store a "
                "client with short timeouts and few attempts, such as Config(connect_timeout=2, "
                "read_timeout=3, retries={'mode': 'standard', 'total_max_attempts': 3}), or let "
                "it build its own",
                "unbounded: adaptive retry mode, or a store that changes its writes"
                if bound is None
                else f"{bound / 1000:.0f} s",
                left_s,
                CLOCK_SKEW_TOLERANCE_MS,
            )
        return None

    def _send_all(self) -> None:
        """Send what is queued, a group at a time, until the queue is empty."""
        while True:
            with self._lock:
                group = self._queue[:GROUP]
                del self._queue[:GROUP]
                if not group:
                    self._senders -= 1
                    return
            try:
                for kind in ("complete", "release"):
                    self._send(kind, [pending for pending in group if pending.kind == kind])
            except BaseException as exc:  # never leave a record's future unsettled
                for pending in group:
                    if not pending.future.done():
                        pending.future.set_exception(exc)
                if not isinstance(exc, Exception):
                    with self._lock:
                        self._senders -= 1
                    raise

    def _send(self, kind: str, pending: list[_Pending]) -> None:
        """Write ``pending`` in one request, then what is left unprocessed again while each
        lease allows it; what it no longer allows is written conditionally."""
        pause = BACKOFF_S
        while pending:
            store = self._store
            bound = None if store is None else store.unconditional_write_ms()
            grouped: list[_Pending] = []
            for item in pending:
                if (
                    store is not None
                    and bound is not None
                    and _send_by(item.call, bound) > store.clock.now_ms()
                ):
                    grouped.append(item)
                    continue
                _settle(item)  # the lease is too near its end: the conditional write
            if not grouped or store is None or bound is None:
                return
            send_by = min(_send_by(item.call, bound) for item in grouped)
            # The request counts as the first record's (its decision's StoreRequests).
            try:
                if kind == "complete":
                    records = [item.call.args[0] for item in grouped]
                    left = {
                        id(r)
                        for r in grouped[0].context.run(
                            store.put_completed, records, send_by_ms=send_by
                        )
                    }
                    pending = [item for item in grouped if id(item.call.args[0]) in left]
                else:
                    keys = [item.call.args[0] for item in grouped]
                    undeleted = set(
                        grouped[0].context.run(store.delete_claims, keys, send_by_ms=send_by)
                    )
                    pending = [item for item in grouped if item.call.args[0] in undeleted]
            except Exception as exc:
                self._refused(exc)
                for item in grouped:
                    _settle(item)
                return
            left_ids = {id(item) for item in pending}
            for item in grouped:
                if id(item) not in left_ids:
                    item.future.set_result(True)
            if pending:
                time.sleep(pause)
                pause = min(pause * 2, MAX_BACKOFF_S)

    def _refused(self, exc: Exception) -> None:
        """Stop grouping for good when the function may not call ``BatchWriteItem``."""
        if error_code(exc.__cause__ or exc) == "AccessDeniedException":
            self._store = None
            logger.warning(
                "batch completions: dynamodb:BatchWriteItem is denied, so each completion is "
                "a PutItem of its own; grant it on the idempotency table to write them together"
            )


def _kind(store: BatchCompleteStore, call: StoreCall) -> str | None:
    """``"complete"`` or ``"release"`` for a call a group may carry; None for any other."""
    if call.function == store.complete and isinstance(call.args[0], IdempotencyRecord):
        return "complete"
    if call.function == store.release and not call.kwargs:
        return "release"
    return None


def _send_by(call: StoreCall, bound_ms: int) -> int:
    """The last moment ``call`` may be sent unconditionally with a request that takes up to
    ``bound_ms``: before it, no other invocation can have taken the key over."""
    return int(call.lease_end_ms or 0) - CLOCK_SKEW_TOLERANCE_MS - bound_ms


def _perform(call: StoreCall) -> Any:
    return call.function(*call.args, **call.kwargs)


def _settle(pending: _Pending) -> None:
    """Carry the call out (the conditional write), in its record's context, and settle its
    future with the outcome."""
    try:
        pending.future.set_result(pending.context.run(_perform, pending.call))
    except Exception as exc:
        pending.future.set_exception(exc)
