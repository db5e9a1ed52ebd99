"""The function the mixed-fleet tests decorate with both Powertools and this library."""

from __future__ import annotations

import threading
from typing import Any

WAIT_S = 30


class Crash(BaseException):
    """Ends an invocation the way a timeout does: Powertools cannot clean up after it."""


class Body:
    """The function both libraries decorate: counts its runs; the first may wait to be let go."""

    def __init__(self) -> None:
        self.calls = 0
        self.crash = False
        self.entered = threading.Event()
        self.go = threading.Event()
        self.go.set()
        counting = threading.Lock()  # racing runs must each count, or a double run could hide

        def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
            with counting:
                self.calls += 1
                run = self.calls
            self.entered.set()
            if self.crash:
                raise Crash
            if run == 1:
                assert self.go.wait(WAIT_S)
            return {"order": event["id"], "run": run}

        self.handler = handler  # one function object: both libraries derive the same prefix
