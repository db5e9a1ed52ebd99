"""Interrupt a durable function where Lambda can: after a step's side effect, before its checkpoint.

A durable step that returned has done its side effect, and our record holds its result; the
SDK's checkpoint of it comes next. Lambda can stop the invocation between the two (a timeout,
a crash, a redeploy): the next invocation replays the execution and finds no checkpoint for the
step. `stop_after_step` makes that happen on the SDK's local runner
(``DurableFunctionTestRunner``): it holds the invocation's thread right there, so the runner's
``invocation_timeout`` ends the invocation with nothing checkpointed, and invokes the execution
again, as the service does.

    with stop_after_step("charge") as stop, DurableFunctionTestRunner(
        handler=handler, invocation_timeout=3
    ) as runner:
        result = runner.run(input=order, execution_timeout=60)
    assert stop.stopped == 1

A sleep inside the side effect does not do this: it only makes the step slower. Only a stop
that the runner sees as the end of the invocation leaves the step without its checkpoint.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from idempotent_lambda import durable

__all__ = ["StepStop", "stop_after_step"]

#: The longest a held thread waits for the `stop_after_step` block to end.
_HOLD_LIMIT_S = 600


class StepStop:
    """What `stop_after_step` did: read `stopped` after the run to see the stop happened.

    Attributes:
        stopped: How many invocations were stopped so far.
    """

    def __init__(self, name: str | None, times: int) -> None:
        self.stopped = 0
        self._name = name
        self._left = times
        self._lock = threading.Lock()
        self._release = threading.Event()

    def _after_record(self, name: str) -> None:
        with self._lock:
            if self._left <= 0 or (self._name is not None and name != self._name):
                return
            self._left -= 1
            self.stopped += 1
        self._release.wait(_HOLD_LIMIT_S)  # the invocation ends here for the runner


@contextlib.contextmanager
def stop_after_step(name: str | None = None, *, times: int = 1) -> Iterator[StepStop]:
    """Stop the invocation after a `durable.step`'s record is completed, before its checkpoint.

    While the block runs, the first ``times`` steps named ``name`` (any step when None) hold
    their invocation's thread once their record is completed; give the runner a short
    ``invocation_timeout`` (a few seconds) so it ends that invocation and invokes the execution
    again. The held threads are let go when the block ends: run the execution to its end inside
    it. The step's rerun replays its record; with the SDK's ``context.step`` alone it would run
    the side effect again.

    Args:
        name: The step's name, or None for the first steps of any name.
        times: How many invocations to stop.

    Raises:
        ValueError: ``times`` is below 1.
    """
    if times < 1:
        raise ValueError("times must be at least 1")
    stop = StepStop(name, times)
    durable.after_record.append(stop._after_record)
    try:
        yield stop
    finally:
        durable.after_record.remove(stop._after_record)
        stop._release.set()
