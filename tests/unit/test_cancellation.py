"""An ``async def`` caller cancelled during a store call never strands its record (issue 11, 7b).

The store call runs in a worker thread and cannot be stopped; the task waits for it, settles
the record (release after a claim, the marker after an unstorable result), and then raises
`asyncio.CancelledError`. The store double holds the chosen call at a gate (a threading.Event),
so each cancellation lands while that call is in flight: no timing is involved.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from idempotent_lambda import (
    IdempotencyRecord,
    IdempotencyUnstorableResultError,
    InMemoryPersistenceLayer,
    Status,
    idempotent,
)
from idempotent_lambda.persistence.base import ClaimOutcome
from idempotent_lambda.testing import FakeLambdaContext
from tests.unit._doubles import Runs, is_unstorable_marker

T = TypeVar("T")
EVENT = {"order_id": 7}
#: Generous bound on every wait for the other side: reached only if the test is broken.
WAIT_S = 60


class Gate:
    """Holds one store call: `reached` when it arrives, runs it once `opened`, then `done`."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.opened = threading.Event()
        self.done = threading.Event()


class GatedStore:
    """Wrap a store; the first call of each gated operation waits at its `Gate`.

    Args:
        inner: The real store.
        gated: The operations to hold (``"claim"``, ``"complete"``, ``"release"``).
        refuse_complete: Make the gated completion raise this instead of completing.
    """

    def __init__(
        self,
        inner: InMemoryPersistenceLayer,
        *gated: str,
        refuse_complete: Exception | None = None,
    ) -> None:
        self.inner = inner
        self.clock = inner.clock
        self.gates = {operation: Gate() for operation in gated}
        self.keys: list[str] = []
        self._refuse_complete = refuse_complete

    def _through(self, operation: str, call: Callable[[], T]) -> T:
        gate = self.gates.pop(operation, None)
        if gate is None:
            return call()
        gate.reached.set()
        try:
            assert gate.opened.wait(WAIT_S), f"the test never opened the {operation} gate"
            return call()
        finally:
            gate.done.set()

    def claim(
        self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int
    ) -> ClaimOutcome:
        """Claim, once the gate (if any) opens."""
        self.keys.append(record.idempotency_key)
        return self._through(
            "claim",
            lambda: self.inner.claim(record, now_ms=now_ms, lease_cutoff_ms=lease_cutoff_ms),
        )

    def complete(self, record: IdempotencyRecord) -> bool:
        """Complete (or refuse as told), once the gate (if any) opens."""

        def complete() -> bool:
            refusal, self._refuse_complete = self._refuse_complete, None
            if refusal is not None:
                raise refusal
            return self.inner.complete(record)

        return self._through("complete", complete)

    def release(self, idempotency_key: str, owner: str) -> bool:
        """Release, once the gate (if any) opens."""
        return self._through("release", lambda: self.inner.release(idempotency_key, owner))

    def get(self, idempotency_key: str) -> IdempotencyRecord | None:
        """Read, once the gate (if any) opens."""
        return self._through("get", lambda: self.inner.get(idempotency_key))


def handler_on(store: GatedStore, runs: Runs) -> Callable[..., Any]:
    """Return an idempotent ``async def`` handler on ``store`` that counts its runs."""

    @idempotent(persistence_store=store)
    async def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs(event)
        return {"order_id": event["order_id"]}

    return handler  # type: ignore[no-any-return]


async def cancel_at(task: asyncio.Future[Any], gate: Gate) -> None:
    """Cancel ``task`` while the call held at ``gate`` is in flight, then let the call go on."""
    assert await asyncio.to_thread(gate.reached.wait, WAIT_S)
    task.cancel()
    gate.opened.set()


def run_cancelled(store: GatedStore, handler: Callable[..., Any], *operations: str) -> None:
    """Call ``handler``, cancel it at each of ``operations`` in turn, expect CancelledError."""

    async def main() -> None:
        task = asyncio.ensure_future(handler(EVENT, FakeLambdaContext(clock=store.clock)))
        for operation in operations:
            await cancel_at(task, store.gates[operation])
        with pytest.raises(asyncio.CancelledError):
            await task

    gates = [store.gates[operation] for operation in operations]
    asyncio.run(main())
    assert all(gate.done.wait(WAIT_S) for gate in gates)  # the held calls ran to their end


def test_cancelled_during_the_claim_releases_it_and_never_runs_the_body(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """The claim lands after the task was cancelled: it is released, the body never starts."""
    runs = Runs()
    store = GatedStore(idempotency_store, "claim")
    handler = handler_on(store, runs)
    run_cancelled(store, handler, "claim")

    assert (0, None) == (runs.count, idempotency_store.get(store.keys[0]))
    assert {"order_id": 7} == asyncio.run(handler(EVENT, None))  # a retry runs it now
    assert 1 == runs.count


def test_cancelled_again_during_that_release_still_releases(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """A second cancellation, while the claim is being released, does not stop the release."""
    runs = Runs()
    store = GatedStore(idempotency_store, "claim", "release")
    run_cancelled(store, handler_on(store, runs), "claim", "release")

    assert (0, None) == (runs.count, idempotency_store.get(store.keys[0]))


def test_cancelled_during_the_completion_completes_and_replays(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """The body ran once; its completion lands, and a retry replays it."""
    runs = Runs()
    store = GatedStore(idempotency_store, "complete")
    handler = handler_on(store, runs)
    run_cancelled(store, handler, "complete")

    record = idempotency_store.get(store.keys[0])
    assert record is not None
    assert Status.COMPLETED == record.status
    assert {"order_id": 7} == asyncio.run(handler(EVENT, None))
    assert 1 == runs.count


def test_cancelled_during_an_unstorable_completion_still_stores_the_marker(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """The store refuses the result after the cancellation: the marker is stored all the same."""
    runs = Runs()
    refusal = IdempotencyUnstorableResultError("too large")
    store = GatedStore(idempotency_store, "complete", refuse_complete=refusal)
    handler = handler_on(store, runs)
    run_cancelled(store, handler, "complete")

    record = idempotency_store.get(store.keys[0])
    assert record is not None
    assert (Status.COMPLETED, True) == (
        record.status,
        is_unstorable_marker(record.response_data),
    )
    with pytest.raises(IdempotencyUnstorableResultError):
        asyncio.run(handler(EVENT, None))
    assert 1 == runs.count
