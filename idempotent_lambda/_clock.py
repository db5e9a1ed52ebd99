"""Time source used by the engine and the stores; tests inject their own."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Anything that tells the current time in epoch milliseconds."""

    def now_ms(self) -> int:
        """Return the current time as integer epoch milliseconds."""
        ...


class SystemClock:
    """The wall clock (`time.time`), which is what other Lambda instances see too."""

    def now_ms(self) -> int:
        """Return the current wall-clock time in epoch milliseconds."""
        return time.time_ns() // 1_000_000


SYSTEM_CLOCK: Clock = SystemClock()
