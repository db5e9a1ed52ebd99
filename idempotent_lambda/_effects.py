"""Effects a flow yields, and the two drivers that carry them out.

A flow (`idempotent_lambda._engine.IdempotentCall.flow`) is a generator that describes one
invocation as a sequence of effects; it never does I/O itself. `run_sync` performs the effects in
the calling thread, `run_async` without blocking the event loop, so `def` and `async def`
functions share one state machine.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from time import perf_counter
from types import MappingProxyType
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
    send, throw = flow.send, flow.throw
    sent: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = send(sent) if error is None else throw(error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        sent = error = None
        if type(effect) is StoreCall:
            started = perf_counter()
            try:
                sent = effect.function(*effect.args, **effect.kwargs)
            except BaseException as exc:  # handed back to the flow, which re-raises it unchanged
                error = exc
            effect.tally.count(started)
        else:
            try:
                if effect is RUN_BODY:
                    sent = body()
                else:
                    time.sleep(cast(Pause, effect).seconds)
            except BaseException as exc:
                error = exc


async def run_async(flow: Flow, body: Callable[[], Awaitable[T]]) -> T:
    """Carry out a flow's effects without blocking the event loop and return its result."""
    import asyncio  # only async callers pay for importing it

    sent: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = flow.send(sent) if error is None else flow.throw(error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        sent = error = None
        if type(effect) is StoreCall:
            started = perf_counter()
            try:
                sent = await asyncio.to_thread(effect.function, *effect.args, **effect.kwargs)
            except BaseException as exc:  # handed back to the flow, which re-raises it unchanged
                error = exc
            effect.tally.count(started)
        else:
            try:
                if effect is RUN_BODY:
                    sent = await body()
                else:
                    await asyncio.sleep(cast(Pause, effect).seconds)
            except BaseException as exc:
                error = exc
