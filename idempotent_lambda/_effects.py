"""Effects a flow yields, and the two drivers that carry them out.

A flow (`idempotent_lambda._engine.IdempotentCall.flow`) is a generator that describes one
invocation as a sequence of effects; it never does I/O itself. `run_sync` performs the effects in
the calling thread, `run_async` without blocking the event loop, so `def` and `async def`
functions share one state machine.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StoreCall:
    """Effect: call a store method (in a worker thread when running async)."""

    operation: str
    function: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


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
            return stop.value  # type: ignore[no-any-return]
        sent, error = None, None
        try:
            if isinstance(effect, StoreCall):
                sent = effect.function(*effect.args, **effect.kwargs)
            elif isinstance(effect, Pause):
                time.sleep(effect.seconds)
            else:
                sent = body()
        except BaseException as exc:  # handed back to the flow, which re-raises it unchanged
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
        sent, error = None, None
        try:
            if isinstance(effect, StoreCall):
                sent = await asyncio.to_thread(effect.function, *effect.args, **effect.kwargs)
            elif isinstance(effect, Pause):
                await asyncio.sleep(effect.seconds)
            else:
                sent = await body()
        except BaseException as exc:  # handed back to the flow, which re-raises it unchanged
            error = exc
