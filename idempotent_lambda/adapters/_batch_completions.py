"""A batch's completions, written together: one ``BatchWriteItem`` for up to 25 records.

A completion is a conditional write: the record is replaced only while it is still this
invocation's IN_PROGRESS claim. That condition can fail only once another invocation has taken
the key over, and none can before the claim's lease has ended: a claimer takes over a lease
only once it ended `CLOCK_SKEW_TOLERANCE_MS` ago on its own clock (Powertools, sharing the table,
once it ended on its clock), so while our clock reads less than the lease end minus the
tolerance, nobody can have taken it. A completion *sent* while the lease has more left than the
tolerance plus the longest the request can take (`BatchCompleteStore.unconditional_write_ms`,
every botocore attempt and backoff) is therefore applied while the condition still holds, and
may be written without it: with other records' completions, 25 in one request (DESIGN §13).
Past that point, or on a store without the capability, the conditional write stays.

`CompletionWriter` groups them as a commit log does: the first completion is sent at once, and
those that arrive while a request is out go together in the next one. No completion waits for
a timer or for the batch to end, so a record's completion is written at most one request later
than when it was written alone; and the group is as large as the records that finish meanwhile.
Once its records have run, the batch sends what is still queued itself (`flush`) rather than
wait for the request out to come back first.

What can go wrong, and what it costs:

- **DynamoDB leaves items unprocessed** (throttling): they are sent again after 50, 100 and
  200 ms, each only while its lease still allows it (else conditionally); still unprocessed,
  the completion has failed as a failed ``PutItem`` fails today (``COMPLETE_FAILED``, the record
  stays IN_PROGRESS until its lease ends, the record counts as done).
- **The request fails as a whole** (a result too large for an item, an outage, no
  ``dynamodb:BatchWriteItem`` permission): each of its records is completed conditionally, one
  ``PutItem`` each, exactly as without batching. Without the permission, batching stops for the
  handler (one warning).
- **The Lambda dies** after a body and before its completion is written: the record stays
  IN_PROGRESS, and its lease is the invocation's deadline, as for a Lambda that dies between a
  body and its conditional completion today. Lambda retries the batch (or the record); until
  the lease ends the record is reported, not run; then it is taken over and runs once more.
  Nothing is lost: the batch answer is sent only after every completion is settled.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from idempotent_lambda._effects import StoreCall
from idempotent_lambda._engine import CLOCK_SKEW_TOLERANCE_MS
from idempotent_lambda.exceptions import IdempotencyPersistenceLayerError
from idempotent_lambda.persistence._aws import error_code
from idempotent_lambda.persistence.protocol import BatchCompleteStore, PersistenceStore
from idempotent_lambda.record import IdempotencyRecord

__all__ = ["CompletionWriter"]

logger = logging.getLogger("idempotent_lambda.batch")

#: Records per request (DynamoDB's ``BatchWriteItem`` limit).
GROUP = 25
#: Requests sending one group at most (the first, then retries of unprocessed items), and the
#: pauses before each retry.
ATTEMPTS = 4
BACKOFF_S = (0.05, 0.1, 0.2)
#: Requests out at once, beyond the first, when full groups wait.
MAX_SENDERS = 4

_Pending = tuple[StoreCall, "Future[Any]"]


class CompletionWriter:
    """Writes a batch handler's completions behind its records: grouped when it may.

    Args:
        store: The engine's store (its record-format view): its ``complete`` is what a
            completion calls.
        pool: Runs the requests.
    """

    def __init__(self, store: PersistenceStore, pool: Callable[[], Executor]) -> None:
        self._store = store if isinstance(store, BatchCompleteStore) else None
        self._pool = pool
        self._lock = threading.Lock()
        self._queue: list[_Pending] = []
        self._senders = 0

    def submit(self, call: StoreCall) -> Future[Any]:
        """Start writing a completion ``call`` behind; its future holds what ``call`` returns.

        A completion written alone runs in the caller's context (the record's), so its client
        span nests under the record's span; a group belongs to no one record.
        """
        store = self._store
        if store is None or call.lease_end_ms is None or call.function != store.complete:
            return self._pool().submit(contextvars.copy_context().run, _perform, call)
        bound = store.unconditional_write_ms()
        if bound is None or not _may_go_unconditional(call, store, bound):
            return self._pool().submit(contextvars.copy_context().run, _perform, call)
        future: Future[Any] = Future()
        with self._lock:
            self._queue.append((call, future))
            start = self._senders == 0 or (
                len(self._queue) >= GROUP and self._senders < MAX_SENDERS
            )
            if start:
                self._senders += 1
        if start:
            self._pool().submit(self._send_all)
        return future

    def flush(self) -> None:
        """Send what is queued from this thread too: its caller is about to wait for it."""
        with self._lock:
            self._senders += 1
        self._send_all()

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
                self._send(group)
            except BaseException as exc:  # never leave a record's future unsettled
                for _, future in group:
                    if not future.done():
                        future.set_exception(exc)
                if not isinstance(exc, Exception):
                    with self._lock:
                        self._senders -= 1
                    raise

    def _send(self, group: list[_Pending]) -> None:
        """Write ``group`` in one request, then its unprocessed items again, then give up."""
        store = self._store
        pending = group
        for attempt in range(ATTEMPTS):
            if attempt:
                time.sleep(BACKOFF_S[attempt - 1])
            bound = None if store is None else store.unconditional_write_ms()
            grouped: list[_Pending] = []
            for call, future in pending:
                if (
                    store is not None
                    and bound is not None
                    and _may_go_unconditional(call, store, bound)
                ):
                    grouped.append((call, future))
                    continue
                _settle(future, call)  # the lease is too near its end: the conditional write
            if not grouped or store is None:
                return
            by_record = {id(call.args[0]): (call, future) for call, future in grouped}
            try:
                left = store.put_completed([call.args[0] for call, _ in grouped])
            except Exception as exc:
                self._refused(exc)
                for call, future in grouped:
                    _settle(future, call)
                return
            unprocessed = {id(record) for record in left}
            for key, (_, future) in by_record.items():
                if key not in unprocessed:
                    future.set_result(True)
            pending = [by_record[id(record)] for record in left]
            if not pending:
                return
        for _, future in pending:
            future.set_exception(
                IdempotencyPersistenceLayerError(
                    f"DynamoDB BatchWriteItem left the completion unprocessed {ATTEMPTS} times"
                )
            )

    def _refused(self, exc: Exception) -> None:
        """Stop grouping for good when the function may not call ``BatchWriteItem``."""
        if error_code(exc.__cause__ or exc) == "AccessDeniedException":
            self._store = None
            logger.warning(
                "batch completions: dynamodb:BatchWriteItem is denied, so each completion is "
                "a PutItem of its own; grant it on the idempotency table to write them together"
            )


def _may_go_unconditional(call: StoreCall, store: BatchCompleteStore, bound_ms: int) -> bool:
    """Tell whether ``call``'s lease leaves room for an unconditional request sent now."""
    lease_end = call.lease_end_ms
    if lease_end is None or not isinstance(call.args[0], IdempotencyRecord):
        return False
    return lease_end - store.clock.now_ms() > CLOCK_SKEW_TOLERANCE_MS + bound_ms


def _perform(call: StoreCall) -> Any:
    return call.function(*call.args, **call.kwargs)


def _settle(future: Future[Any], call: StoreCall) -> None:
    """Carry ``call`` out (the conditional completion) and settle ``future`` with its outcome."""
    try:
        future.set_result(_perform(call))
    except Exception as exc:
        future.set_exception(exc)
