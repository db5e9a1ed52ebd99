"""How one decorated function's records are written and read back, one store call at a time.

`Recorder` holds what every invocation of the function shares (its store view, config, local
cache, serializer and the adapter's hooks). Its generators take the invocation and its `Tally`:
each store call timed and counted, the completion (`complete`, or `commit` with business
writes), the release, the marker of an unstorable result, and the replay of a stored one. The
claim loop (`idempotent_lambda._claim`) and the engine (`idempotent_lambda._engine`) drive them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Generator, Sequence
from time import perf_counter
from typing import Any, NoReturn

from idempotent_lambda._effects import Effect, Flow, Pause, StoreCall
from idempotent_lambda._identity import Invocation
from idempotent_lambda._observability import Outcome, Tally, cause_name, requests_of_context
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyPersistenceLayerError,
    IdempotencyTransactionError,
    IdempotencyUnstorableResultError,
    IdempotencyValidationError,
    IdempotencyWriteConflictError,
)
from idempotent_lambda.persistence.protocol import PersistenceStore, TransactItem, transactional
from idempotent_lambda.record import IdempotencyRecord, Status

#: A waiter (or a write's retry) gives up this long before its own deadline, to leave time to
#: answer.
WAIT_DEADLINE_MARGIN_MS = 200
#: Pauses between the attempts of a write that met another Region's write of the same item
#: (a global table's ReplicatedWriteConflictException): contention that clears in milliseconds.
_CONFLICT_PAUSES_S = (0.025, 0.05, 0.1, 0.2)


class LocalCache:
    """A thread-safe LRU of COMPLETED records (``use_local_cache``); expired ones drop out."""

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


class Recorder:
    """Write one function's records and read their results back.

    Args:
        store: The store's view for ``config.record_format``.
        config: The function's settings.
        serializer: The ``to_dict``/``from_dict`` pair results are stored and rebuilt with.
        store_result_if: Adapters' filter (see `idempotent_lambda._engine.IdempotentFunction`).
        on_replay: Adapters' hook, applied to replayed results after ``config.response_hook``.
    """

    def __init__(
        self,
        store: PersistenceStore,
        config: IdempotencyConfig,
        serializer: Any,
        store_result_if: Callable[[Any], bool] | None,
        on_replay: Callable[[Any, IdempotencyRecord], Any] | None,
    ) -> None:
        self.store = store
        self.config = config
        self.cache = LocalCache(config.local_cache_max_items) if config.use_local_cache else None
        self.store_result_if = store_result_if
        self._to_dict = serializer.to_dict
        self._from_dict = serializer.from_dict
        self._on_replay = on_replay

    def call(
        self,
        tally: Tally,
        operation: str,
        function: Callable[..., Any],
        *args: Any,
        report_errors: bool = True,
        deadline_ms: int | None = None,
        behind: bool = False,
        lease_end_ms: int | None = None,
        **kwargs: Any,
    ) -> Flow:
        """Yield one store call, timed and counted on ``tally``; a failure is a STORE_ERROR.

        A write that met another Region's write of the item is tried again after each of
        `_CONFLICT_PAUSES_S`, while a pause ends before ``deadline_ms`` (less the margin).
        ``behind`` marks a completion a batch lane may write while its next record runs, and
        ``lease_end_ms`` (of a completion or a release) when its claim stops protecting it.
        """
        pauses = iter(_CONFLICT_PAUSES_S)
        while True:
            started = perf_counter()
            outer = requests_of_context.get()  # a nested call's, restored after this one
            requests_of_context.set(tally.requests)
            try:
                result = yield StoreCall(function, args, kwargs, behind, lease_end_ms)
            except BaseException as exc:
                requests_of_context.set(outer)
                tally.add_store_call(ms_since(started))
                if isinstance(exc, IdempotencyWriteConflictError):
                    pause = next(pauses, None)
                    now = self.store.clock.now_ms()
                    if pause is not None and (
                        deadline_ms is None
                        or now + pause * 1000 < deadline_ms - WAIT_DEADLINE_MARGIN_MS
                    ):
                        yield Pause(pause)
                        continue
                if report_errors and isinstance(exc, IdempotencyPersistenceLayerError):
                    tally.report(Outcome.STORE_ERROR, error=cause_name(exc), op=operation)
                raise
            requests_of_context.set(outer)
            tally.add_store_call(ms_since(started))
            return result

    # --- Keep the result: complete, commit, or refuse it as unstorable ---

    def stored_text(self, result: Any) -> str | None:
        """Return what is stored for ``result``; None when ``store_result_if`` rejects it.

        Raises:
            IdempotencyUnstorableResultError: The filter or the serializer raised, or the
                result has no stored form: it can be neither kept nor dropped safely.
        """
        keep = self.store_result_if
        try:
            if keep is not None and not keep(result):
                return None
        except Exception as exc:
            raise IdempotencyUnstorableResultError(
                "deciding whether to store the result failed: the adapter's store_result_if "
                f"(for HTTP, store_4xx) raised {type(exc).__name__}"
            ) from exc
        try:
            value = self._to_dict(result)
        except Exception as exc:
            raise IdempotencyUnstorableResultError(
                f"output serializer failed on a {type(result).__name__} result: "
                f"{type(exc).__name__}"
            ) from exc
        return self.config.format.encode_result(value)

    def complete(self, inv: Invocation, tally: Tally, data: str) -> Flow:
        """Complete the record with ``data``; False when that failed (logged, not raised).

        On a store outage or a lost lease the caller still gets the result, and the record
        stays IN_PROGRESS until its lease ends. A result the store refuses (too large) or
        fails to write with an error of its own (its compressor, say) is unstorable.
        """
        try:
            ok = yield from self._write_completed(inv, tally, data)
        except IdempotencyUnstorableResultError as exc:
            yield from self.refuse_unstorable(inv, tally, exc)
        except IdempotencyPersistenceLayerError as exc:
            tally.report(Outcome.COMPLETE_FAILED, error=cause_name(exc))
            return False
        except Exception as exc:
            unstorable = IdempotencyUnstorableResultError(
                f"the store failed to write the result: {type(exc).__name__}"
            )
            unstorable.__cause__ = exc
            yield from self.refuse_unstorable(inv, tally, unstorable)
        if not ok:
            tally.report(Outcome.LEASE_LOST)
        return ok

    def commit(
        self, inv: Invocation, tally: Tally, data: str, writes: Sequence[TransactItem]
    ) -> Flow:
        """Complete in one transaction with the body's business writes: all commit, or none.

        Unlike `complete`, a failure is raised: the caller must not believe in writes that
        were not made. The record is released (a no-op if an ambiguous failure did commit).
        """
        try:
            ok = yield from self._write_completed(inv, tally, data, writes)
        except IdempotencyUnstorableResultError as exc:  # no marker: nothing is done
            yield from self.refuse_unstorable(inv, tally, exc, writes)
        except Exception as exc:
            store_failed = isinstance(exc, IdempotencyPersistenceLayerError)
            yield from self.release(
                inv, tally, exc, cause_name(exc) if store_failed else type(exc).__name__
            )
            raise
        if not ok:
            tally.report(Outcome.LEASE_LOST, op="complete")
            raise IdempotencyAlreadyInProgressError(
                "this invocation's lease passed before its transaction committed, and another "
                "invocation holds the key now; nothing was written"
            )
        return True

    def refuse_unstorable(
        self,
        inv: Invocation,
        tally: Tally,
        error: IdempotencyUnstorableResultError,
        writes: Sequence[TransactItem] = (),
    ) -> Generator[Effect, Any, NoReturn]:
        """Settle the record of a result that cannot be stored, then raise.

        Without business writes the record is completed with a marker, so retries raise
        ``error`` too instead of running the body again. With writes nothing was done (they
        commit only with the record): the record is released, `IdempotencyTransactionError`
        raised.
        """
        if writes:
            yield from self.release(inv, tally, error, type(error).__name__)
            raise IdempotencyTransactionError(
                f"nothing was written, because the result cannot be stored: {error}"
            ) from error
        try:
            yield from self._write_completed(
                inv, tally, self.config.format.unstorable_marker(str(error))
            )
        except Exception as exc:  # an outage: the record stays IN_PROGRESS until its lease ends
            tally.report(Outcome.COMPLETE_FAILED, error=cause_name(exc))
        else:
            tally.report(Outcome.UNSTORABLE)
        raise error

    def _write_completed(
        self, inv: Invocation, tally: Tally, data: str, writes: Sequence[TransactItem] = ()
    ) -> Flow:
        """Complete the record with ``data`` (and ``writes``); False when the lease was lost."""
        expiry = self.store.clock.now_ms() // 1000 + self.config.expires_after_seconds
        record = IdempotencyRecord(
            inv.key, Status.COMPLETED, expiry, None, data, inv.payload_hash, inv.owner
        )
        if writes:
            complete_with = transactional(self.store).complete_with
            ok = yield from self.call(
                tally, "complete", complete_with, record, writes, report_errors=False
            )
        else:
            ok = yield from self.call(
                tally,
                "complete",
                self.store.complete,
                record,
                report_errors=False,
                deadline_ms=inv.deadline_ms,
                behind=True,
                lease_end_ms=inv.lease_end_ms,
            )
        if not ok:
            ok = yield from self._answer_was_lost(inv, tally, Status.COMPLETED)
        if ok and self.cache is not None:
            self.cache.put(record)
        return ok

    # --- Give the key up ---

    def release(
        self,
        inv: Invocation,
        tally: Tally,
        original: BaseException | None,
        reason: str | None = None,
        *,
        held: bool = False,
    ) -> Flow:
        """Delete this invocation's claim; a failure is logged and noted on ``original``.

        ``reason`` says why a body that returned is released (logged as the error). A ``held``
        release (see `idempotent_lambda._engine.IdempotentFunction.settle_held`) comes after
        the rest of the invocation: a later call of the same execution may have taken the
        claim up again and completed it, and that record stays, with nothing reported.
        """
        try:
            released = yield from self.call(
                tally,
                "release",
                self.store.release,
                inv.key,
                inv.owner,
                report_errors=False,
                deadline_ms=inv.deadline_ms,
                lease_end_ms=inv.lease_end_ms,
            )
        except IdempotencyPersistenceLayerError as exc:
            if original is not None:
                add_note(original, f"idempotent_lambda: releasing the record failed too: {exc}")
            tally.report(Outcome.RELEASE_FAILED, error=cause_name(exc))
            return
        if not released:
            released = yield from self._answer_was_lost(inv, tally, None)
        if (
            not released
            and held
            and (yield from self._answer_was_lost(inv, tally, Status.COMPLETED))
        ):
            return
        tally.report(Outcome.RELEASED if released else Outcome.LEASE_LOST, error=reason)

    def _answer_was_lost(self, inv: Invocation, tally: Tally, expected: Status | None) -> Flow:
        """After a refused complete or release, tell whether our own write is what refused it.

        A write whose answer is lost (a timeout or 5xx after DynamoDB applied it) is retried by
        botocore, and the retry's owner condition fails against the write itself. One read on
        this rare path tells that apart from a lease really lost: the record is ours and
        ``expected`` (COMPLETED), or gone (``expected`` None, a release).
        """
        try:
            get = self.store.get
            record = yield from self.call(tally, "get", get, inv.key, report_errors=False)
        except IdempotencyPersistenceLayerError:
            return False
        if expected is None:
            return record is None
        return record is not None and record.status is expected and record.owner == inv.owner

    # --- Replay ---

    def validate(self, record: IdempotencyRecord, inv: Invocation, tally: Tally) -> None:
        """Raise `IdempotencyValidationError` if ``record`` was stored for another payload."""
        if inv.payload_hash is not None and record.payload_hash != inv.payload_hash:
            tally.report(Outcome.VALIDATION_FAILED)
            raise IdempotencyValidationError(
                "the payload differs from the one first sent with this idempotency key"
            )

    def rebuild(self, data: str) -> Any:
        """Return the result stored as ``data``, rebuilt by the serializer."""
        return self._from_dict(self.config.format.decode_result(data))

    def replay(self, record: IdempotencyRecord, tally: Tally, source: str) -> Any:
        """Return the result stored in ``record``; ``source`` says where the record came from.

        Raises:
            IdempotencyUnstorableResultError: It holds the marker of an unstorable result.
            IdempotencyPersistenceLayerError: It holds no result at all.
        """
        tally.report(Outcome.REPLAYED, source=source)
        data = record.response_data
        if data is None:
            raise IdempotencyPersistenceLayerError("a COMPLETED record holds no result")
        reason = self.config.format.unstorable_reason(data)
        if reason is not None:
            raise IdempotencyUnstorableResultError(
                f"the first call ran, but its result could not be stored: {reason}"
            )
        response = self.rebuild(data)
        if self.config.response_hook is not None:
            response = self.config.response_hook(response, record)
        if self._on_replay is not None:
            response = self._on_replay(response, record)
        return response


def add_note(error: BaseException, note: str) -> None:
    """Note ``note`` on ``error``: `BaseException.add_note`, or its attribute by hand on 3.10."""
    add_note = getattr(error, "add_note", None)
    if add_note is not None:
        add_note(note)
    else:  # Python 3.10: the attribute 3.11 reads; 3.10's traceback does not print it
        setattr(error, "__notes__", [*getattr(error, "__notes__", ()), note])  # noqa: B010


def ms_since(started: float) -> float:
    """Return the milliseconds since ``started`` (a `time.perf_counter` reading)."""
    return (perf_counter() - started) * 1000
