"""Effects a flow yields, and the two drivers that carry them out.

A flow (`idempotent_lambda._engine.IdempotentCall.flow`) is a generator that describes one
invocation as a sequence of effects; it never does I/O itself. `run_sync` performs the effects in
the calling thread, `run_async` without blocking the event loop, so `def` and `async def`
functions share one state machine. What both drivers share (stepping the flow, handing each
effect's result or error back to it, timing store calls) is `_Steps`; a driver only says how
each effect is performed.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from time import perf_counter
from types import MappingProxyType, TracebackType
from typing import Any, TypeVar, cast

T = TypeVar("T")


class StoreTally:
    """Store round trips of one invocation and the time they took, for its decision line.

    The one mutable part of an invocation: the drivers add every store call to it.
    """

    __slots__ = ("calls", "ms")

    def __init__(self) -> None:
        self.ms = 0.0
        self.calls = 0

    def count(self, started: float) -> None:
        """Add one store call that began at ``started`` (a `time.perf_counter` reading)."""
        self.ms += (perf_counter() - started) * 1000
        self.calls += 1


_NO_KWARGS: Mapping[str, Any] = MappingProxyType({})


class StoreCall:
    """Effect: call a store method (in a worker thread when running async).

    The driver times the call, failed or not, and adds it to ``tally``. A plain slotted class:
    one is built for every store call.
    """

    __slots__ = ("args", "function", "kwargs", "operation", "tally")

    def __init__(
        self,
        operation: str,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        tally: StoreTally,
        kwargs: Mapping[str, Any] = _NO_KWARGS,
    ) -> None:
        self.operation = operation
        self.function = function
        self.args = args
        self.tally = tally
        self.kwargs = kwargs

    def __call__(self) -> Any:
        """Make the call (in the thread that calls this)."""
        return self.function(*self.args, **self.kwargs)


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
    steps = _Steps(flow)
    for effect in steps:
        with steps.answer(effect):
            if effect is RUN_BODY:
                steps.sent = body()
            elif type(effect) is StoreCall:
                steps.sent = effect()
            else:
                time.sleep(cast(Pause, effect).seconds)
    return cast(T, steps.result)


async def run_async(flow: Flow, body: Callable[[], Awaitable[T]]) -> T:
    """Carry out a flow's effects without blocking the event loop and return its result.

    Cancelling the task never interrupts a store call: the call runs in a worker thread and
    cannot be stopped, so a flow cut off there would not know whether its claim or completion
    was written, and the record would stay IN_PROGRESS until its lease ended. The driver lets the
    call finish and hands its outcome to the flow, then delivers the cancellation at the flow's
    next step (the body that has not started yet, or a pause), or once the flow is done. So a
    claim just written is released, a completion is written (or its unstorable marker), and
    the task then raises `asyncio.CancelledError`, at most one store call's time later.
    """
    import asyncio  # only async callers pay for importing it

    steps = _Steps(flow)
    cancelled: asyncio.CancelledError | None = None
    try:
        for effect in steps:
            with steps.answer(effect):
                if cancelled is not None and type(effect) is not StoreCall:
                    raise cancelled  # into the flow, which releases a claim it holds
                if effect is RUN_BODY:
                    steps.sent = await body()
                elif type(effect) is StoreCall:
                    call = asyncio.ensure_future(asyncio.to_thread(effect))
                    while not call.done():
                        try:
                            await asyncio.wait((call,))  # cancelling this leaves `call` running
                        except asyncio.CancelledError as exc:
                            cancelled = exc
                    steps.sent = call.result()
                else:
                    await asyncio.sleep(cast(Pause, effect).seconds)
    except Exception as exc:
        if cancelled is not None:
            raise cancelled from exc  # the flow's own error, once it settled the record
        raise
    if cancelled is not None:
        raise cancelled
    return cast(T, steps.result)


class _Steps:
    """Steps a flow: iterating gives its effects, `answer` hands each one's outcome back.

    An effect's exception is caught and thrown into the flow at the point that yielded it, so
    the flow decides (a body's exception, for instance, releases the record and re-raises).
    """

    __slots__ = ("_effect", "_flow", "_started", "error", "result", "sent")

    def __init__(self, flow: Flow) -> None:
        self._flow = flow
        self._effect: Effect | None = None
        self._started = 0.0
        self.sent: Any = None
        self.error: BaseException | None = None
        self.result: Any = None

    def __iter__(self) -> Iterator[Effect]:
        flow = self._flow
        while True:
            try:
                effect = flow.send(self.sent) if self.error is None else flow.throw(self.error)
            except StopIteration as stop:
                self.result = stop.value
                return
            self.sent = self.error = None
            yield effect

    def answer(self, effect: Effect) -> _Steps:
        """Return the context that performs ``effect``: its error goes back to the flow."""
        self._effect = effect
        self._started = perf_counter()
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        effect = self._effect
        if type(effect) is StoreCall:
            effect.tally.count(self._started)
        self.error = error
        return True  # handed back to the flow, which re-raises it unchanged


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
        """Call a ``def`` function."""
        self.started = True
        result = self._call()
        self.returned = True
        return result

    async def run_async(self) -> Any:
        """Call an ``async def`` function."""
        self.started = True
        result = await self._call()
        self.returned = True
        return result
