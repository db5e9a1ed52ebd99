"""Running the body under a claim, then recording what came of it.

`Recorder.run_and_record` is the second half of an invocation that `IdempotentCall.flow` (in
`idempotent_lambda._engine`) claimed: it runs the body, then completes the record with the
result, commits it with the body's queued writes, releases it, or settles an unstorable result.
Like `flow`, each method is a generator of effects that the drivers carry out.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from time import perf_counter
from typing import Any, NoReturn

from idempotent_lambda._cache import LocalCache
from idempotent_lambda._effects import RUN_BODY, Effect, Flow, StoreCall
from idempotent_lambda._identity import Invocation
from idempotent_lambda._observability import Outcome
from idempotent_lambda._reporting import Reporter, cause_name
from idempotent_lambda._result_codec import unstorable_marker
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyPersistenceLayerError,
    IdempotencyTransactionError,
    IdempotencyUnstorableResultError,
)
from idempotent_lambda.persistence.protocol import PersistenceStore, TransactItem, transactional
from idempotent_lambda.record import IdempotencyRecord, Status
from idempotent_lambda.transaction import close_transaction, open_transaction


class Recorder:
    """Run a claimed invocation's body and settle its record: complete, commit or release."""

    def __init__(
        self,
        *,
        store: PersistenceStore,
        config: IdempotencyConfig,
        serializer: Any,
        store_result_if: Callable[[Any], bool] | None,
        cache: LocalCache | None,
        reporter: Reporter,
    ) -> None:
        """Bind the collaborators a result is recorded with.

        Args:
            store: The store's view for ``config.record_format``.
            config: Gives the record format's encoder and the records' lifetime.
            serializer: Its ``to_dict`` turns a result into a storable value.
            store_result_if: Adapters' filter: a result it rejects is not stored.
            cache: The function's local cache, given each completed record; None without one.
            reporter: Where outcomes are reported and store calls are made.
        """
        self.store = store
        self._expires_after_seconds = config.expires_after_seconds
        self._encode_result = config.format.encode_result
        self._to_dict = serializer.to_dict
        self._store_result_if = store_result_if
        self._cache = cache
        self._reporter = reporter

    def run_and_record(self, inv: Invocation, took_over: bool) -> Flow:
        """Run the body under this invocation's claim, then complete (or release) the record.

        Once the body has returned, whatever goes wrong deciding whether to keep its result,
        encoding it or storing it (except a store outage, see `_complete`) ends in
        `_refuse_unstorable`: the record never stays IN_PROGRESS for the body to run again.
        """
        started = perf_counter()
        transaction = open_transaction(self.store)  # current_transaction() while the body runs
        try:
            result = yield RUN_BODY
        except BaseException as exc:
            close_transaction(transaction)  # its writes are discarded
            yield from self.release(inv, exc, _ms_since(started))
            raise
        writes = close_transaction(transaction)
        handler_ms = _ms_since(started)
        try:
            data = self._encode_result(self._to_storable(result)) if self._keeps(result) else None
        except IdempotencyUnstorableResultError as exc:
            yield from self._refuse_unstorable(inv, exc, handler_ms, writes)
        if data is None:
            yield from self.release(inv, None, handler_ms)  # not kept: a retry runs again
            return result
        if writes:
            completed = yield from self._commit(inv, data, handler_ms, writes)
        else:
            completed = yield from self._complete(inv, data, handler_ms)
        if completed:
            outcome = Outcome.TAKEN_OVER if took_over else Outcome.CLAIMED
            self._reporter.report(outcome, inv, handler_ms)
        return result

    def release(
        self,
        inv: Invocation,
        original: BaseException | None,
        handler_ms: float,
        *,
        reason: str | None = None,
    ) -> Flow:
        """Delete this invocation's claim; a failure is logged (and noted on ``original``).

        ``reason`` names why a completed body is released instead (logged as the error).
        """
        reporter = self._reporter
        try:
            released = yield from reporter.store(
                inv,
                StoreCall("release", self.store.release, (inv.key, inv.owner), inv.tally),
                report_errors=False,
            )
        except IdempotencyPersistenceLayerError as exc:
            if original is not None:
                _add_note(original, f"idempotent_lambda: releasing the record failed too: {exc}")
            reporter.report(Outcome.RELEASE_FAILED, inv, handler_ms, error=cause_name(exc))
            return
        if not released:
            released = yield from self._answer_was_lost(inv, None)
        outcome = Outcome.RELEASED if released else Outcome.LEASE_LOST
        reporter.report(outcome, inv, handler_ms, error=reason)

    def _keeps(self, result: Any) -> bool:
        """Ask the adapter's ``store_result_if`` whether to keep ``result``; True without one.

        Raises:
            IdempotencyUnstorableResultError: The filter raised (a user's ``store_4xx``, say):
                the result cannot be kept or dropped safely, so it counts as unstorable.
        """
        if self._store_result_if is None:
            return True
        try:
            return bool(self._store_result_if(result))
        except Exception as exc:
            raise IdempotencyUnstorableResultError(
                "deciding whether to store the result failed: the adapter's store_result_if "
                f"(for HTTP, store_4xx) raised {type(exc).__name__}"
            ) from exc

    def _to_storable(self, result: Any) -> Any:
        try:
            return self._to_dict(result)
        except Exception as exc:
            raise IdempotencyUnstorableResultError(
                f"output serializer failed on a {type(result).__name__} result: "
                f"{type(exc).__name__}"
            ) from exc

    def _complete(self, inv: Invocation, data: str, handler_ms: float) -> Flow:
        """Complete the record with the encoded result; False when that failed (and is logged).

        A store failure or a lost lease is only logged: the caller still gets the result, and
        the record stays IN_PROGRESS until its lease ends. A result the store refuses (too
        large) or fails to write with an error of its own (its compressor, say) is unstorable.
        """
        try:
            ok = yield from self._write_completed(inv, data)
        except IdempotencyUnstorableResultError as exc:
            yield from self._refuse_unstorable(inv, exc, handler_ms)
        except IdempotencyPersistenceLayerError as exc:
            self._reporter.report(Outcome.COMPLETE_FAILED, inv, handler_ms, error=cause_name(exc))
            return False
        except Exception as exc:
            unstorable = IdempotencyUnstorableResultError(
                f"the store failed to write the result: {type(exc).__name__}"
            )
            unstorable.__cause__ = exc
            yield from self._refuse_unstorable(inv, unstorable, handler_ms)
        if not ok:
            self._reporter.report(Outcome.LEASE_LOST, inv, handler_ms)
        return ok

    def _commit(
        self, inv: Invocation, data: str, handler_ms: float, writes: Sequence[TransactItem]
    ) -> Flow:
        """Complete in one transaction with the body's business writes: all commit, or none.

        Unlike a plain completion, a failure is never swallowed: the caller must not believe in
        writes that were not made. The record is released (a no-op if an ambiguous failure did
        commit).
        """
        try:
            ok = yield from self._write_completed(inv, data, writes)
        except IdempotencyUnstorableResultError as exc:  # no marker: nothing is done
            yield from self._refuse_unstorable(inv, exc, handler_ms, writes)
        except Exception as exc:
            store_failed = isinstance(exc, IdempotencyPersistenceLayerError)
            reason = cause_name(exc) if store_failed else type(exc).__name__
            yield from self.release(inv, exc, handler_ms, reason=reason)
            raise
        if not ok:
            self._reporter.report(Outcome.LEASE_LOST, inv, handler_ms, op="complete")
            raise IdempotencyAlreadyInProgressError(
                "this invocation's lease passed before its transaction committed, and another "
                "invocation holds the key now; nothing was written"
            )
        return True

    def _refuse_unstorable(
        self,
        inv: Invocation,
        error: IdempotencyUnstorableResultError,
        handler_ms: float,
        writes: Sequence[TransactItem] = (),
    ) -> Generator[Effect, Any, NoReturn]:
        """Settle the record of a result that cannot be stored, then raise.

        Without business writes the record is completed with a marker, so retries raise
        ``error`` too instead of running the body again. With writes nothing was done (they
        commit only with the record): the record is released and `IdempotencyTransactionError`
        raised.
        """
        if writes:
            yield from self.release(inv, error, handler_ms, reason=type(error).__name__)
            raise IdempotencyTransactionError(
                f"nothing was written, because the result cannot be stored: {error}"
            ) from error
        yield from self._store_marker(inv, str(error), handler_ms)
        raise error

    def _store_marker(self, inv: Invocation, reason: str, handler_ms: float) -> Flow:
        """Complete with a marker so retries raise too instead of running the body again."""
        try:
            yield from self._write_completed(inv, unstorable_marker(reason))
        except Exception as exc:  # an outage: the record stays IN_PROGRESS until its lease ends
            self._reporter.report(Outcome.COMPLETE_FAILED, inv, handler_ms, error=cause_name(exc))
            return
        self._reporter.report(Outcome.UNSTORABLE, inv, handler_ms)

    def _write_completed(
        self, inv: Invocation, data: str, writes: Sequence[TransactItem] = ()
    ) -> Flow:
        """Complete the record with ``data`` (and ``writes``); False when the lease was lost.

        A refused write is checked with `_answer_was_lost`: botocore retries a write whose answer
        was lost (transactions with the same ClientRequestToken), and the retry is refused by
        the write itself.
        """
        expiry = self.store.clock.now_ms() // 1000 + self._expires_after_seconds
        record = IdempotencyRecord(
            inv.key, Status.COMPLETED, expiry, None, data, inv.payload_hash, inv.owner
        )
        call = (
            StoreCall(
                "complete", transactional(self.store).complete_with, (record, writes), inv.tally
            )
            if writes
            else StoreCall("complete", self.store.complete, (record,), inv.tally)
        )
        ok = yield from self._reporter.store(inv, call, report_errors=False)
        if not ok:
            ok = yield from self._answer_was_lost(inv, Status.COMPLETED)
        if ok and self._cache is not None:
            self._cache.put(record)
        return ok

    def _answer_was_lost(self, inv: Invocation, expected: Status | None) -> Flow:
        """After a refused complete/release, tell whether our own write is what refused it.

        A write whose answer is lost (a timeout or 5xx after DynamoDB applied it) is retried by
        botocore, and the retry's owner condition fails against the write itself. One read on
        this rare path tells that apart from a lease really lost: the record is ours and
        ``expected`` (COMPLETED), or gone (``expected`` None, a release).
        """
        try:
            record = yield from self._reporter.store(
                inv, StoreCall("get", self.store.get, (inv.key,), inv.tally), report_errors=False
            )
        except IdempotencyPersistenceLayerError:
            return False
        if expected is None:
            return record is None
        return record is not None and record.status is expected and record.owner == inv.owner


def _add_note(error: BaseException, note: str) -> None:
    """Note ``note`` on ``error``: `BaseException.add_note`, or its attribute by hand on 3.10."""
    add_note = getattr(error, "add_note", None)
    if add_note is not None:
        add_note(note)
    else:  # Python 3.10: the attribute 3.11 reads; 3.10's traceback does not print it
        setattr(error, "__notes__", [*getattr(error, "__notes__", ()), note])  # noqa: B010


def _ms_since(started: float) -> float:
    return (perf_counter() - started) * 1000
