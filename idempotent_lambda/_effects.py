"""Effects a flow yields, and the two drivers that carry them out.

A flow (`idempotent_lambda._engine.IdempotentFunction.flow`) is a generator that describes one
invocation as effects and never does I/O itself. `run_sync` performs them in the calling thread,
`run_async` without blocking the event loop. Each effect's result is sent back into the flow;
its exception is thrown in at the point that yielded it, so the flow decides what follows.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar, cast

from idempotent_lambda.exceptions import IdempotencyConfigError

T = TypeVar("T")


class StoreCall(NamedTuple):
    """Effect: call a store method (in a worker thread when running async).

    ``behind``: a completion whose outcome cannot fail the call, so a batch lane may write it
    while its next record runs (see `idempotent_lambda.adapters._batch_lanes`).
    ``lease_end_ms``: of a completion or a release, when the record's claim stops protecting
    it: a batch may write the completion (or delete a claim taken ahead for a record that does
    not run) unconditionally, with others, well before then
    (`idempotent_lambda.adapters._batch_completions`).
    """

    function: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    behind: bool = False
    lease_end_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Pause:
    """Effect: wait this many seconds."""

    seconds: float


class RunBody:
    """Effect: run the decorated function and send back its result."""


RUN_BODY = RunBody()
Effect = StoreCall | Pause | RunBody
Flow = Generator[Effect, Any, Any]


def run_sync(flow: Flow, body: Callable[[], T]) -> T:
    """Carry out a flow's effects in this thread and return its result."""
    sent: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = flow.send(sent) if error is None else flow.throw(error)
        except StopIteration as stop:
            return cast(T, stop.value)
        finally:
            sent = error = None  # a re-raised error must not keep this frame alive
        try:
            if effect is RUN_BODY:
                sent = body()
            elif isinstance(effect, Pause):
                time.sleep(effect.seconds)
            else:
                store = cast(StoreCall, effect)
                sent = store.function(*store.args, **store.kwargs)
        except BaseException as exc:
            error = exc


async def run_async(flow: Flow, body: Callable[[], Awaitable[T]]) -> T:
    """Carry out a flow's effects without blocking the event loop and return its result.

    Cancelling the task never interrupts a store call: the call runs in a worker thread that
    cannot be stopped, and a flow cut off there would not know whether its claim or completion
    was written. So the call finishes and its outcome goes to the flow; the cancellation is
    delivered at the flow's next step (a body not started yet, or a pause, where a held claim
    is released) or once the flow is done, at most one store call's time later.
    """
    import asyncio  # only async callers pay for importing it

    sent: Any = None
    error: BaseException | None = None
    cancelled: asyncio.CancelledError | None = None
    while True:
        try:
            effect = flow.send(sent) if error is None else flow.throw(error)
        except StopIteration as stop:
            result = stop.value
            break
        except Exception as exc:
            if cancelled is not None:
                raise cancelled from exc  # the flow's own error, once it settled the record
            raise
        finally:
            sent = error = None
        try:
            if cancelled is not None and not isinstance(effect, StoreCall):
                raise cancelled  # into the flow, which releases a claim it holds
            if effect is RUN_BODY:
                sent = await body()
            elif isinstance(effect, Pause):
                await asyncio.sleep(effect.seconds)
            else:
                store = cast(StoreCall, effect)
                call = asyncio.ensure_future(
                    asyncio.to_thread(store.function, *store.args, **store.kwargs)
                )
                while not call.done():
                    try:
                        await asyncio.wait((call,))  # cancelling this leaves `call` running
                    except asyncio.CancelledError as exc:
                        cancelled = exc
                sent = call.result()
        except BaseException as exc:
            error = exc
    if cancelled is not None:
        raise cancelled
    return cast(T, result)


class TrackedBody:
    """The decorated function bound to its arguments, noting how far its call got.

    Adapters answer an error by where it arose: before the body started, it is the engine
    refusing; while it ran, it is the function's own; after it returned, it came from recording
    the result (a completion or a transaction's commit).
    """

    __slots__ = ("_call", "returned", "started")

    def __init__(self, call: Callable[[], Any]) -> None:
        self._call = call
        self.started = False
        self.returned = False

    @property
    def raised(self) -> bool:
        """Tell whether the function itself raised (it started and did not return)."""
        return self.started and not self.returned

    def run(self) -> Any:
        """Call a ``def`` function.

        Raises:
            IdempotencyConfigError: It returned a coroutine, a generator or another awaitable:
                its body has not run (the object is closed unrun). Raised as the function's
                own error, so the claim is released and nothing is stored.
        """
        self.started = True
        result = self._call()
        if isinstance(result, Awaitable | Generator | AsyncGenerator):
            if isinstance(result, Coroutine | Generator):
                result.close()  # never started: closing runs none of it, and silences the warning
            raise IdempotencyConfigError(
                f"the decorated def function returned a {type(result).__name__} instead of a "
                "result: its body did not run. Decorate the async def function itself (or make "
                "this one async def); a generator must return a list instead of yielding"
            )
        self.returned = True
        return result

    async def run_async(self) -> Any:
        """Call an ``async def`` function."""
        self.started = True
        result = await self._call()
        self.returned = True
        return result
