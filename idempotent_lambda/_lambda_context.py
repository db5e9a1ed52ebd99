"""The Lambda context of the invocation running in this thread or task.

The decorators and adapters bind it for the duration of a handler call, so an
`idempotent_function` nested inside sees the invocation's remaining time without user code.
"""

from __future__ import annotations

import contextvars
from typing import Any, Protocol, cast, runtime_checkable


@runtime_checkable
class LambdaContextLike(Protocol):
    """The one thing the library needs from a Lambda context."""

    def get_remaining_time_in_millis(self) -> int:
        """Return the milliseconds left before Lambda stops the invocation."""
        ...


current_lambda_context: contextvars.ContextVar[LambdaContextLike | None] = contextvars.ContextVar(
    "idempotent_lambda_context", default=None
)


def as_lambda_context(candidate: Any) -> LambdaContextLike | None:
    """Return ``candidate`` if it looks like a Lambda context, else None.

    Same test as ``isinstance(candidate, LambdaContextLike)`` (the method exists and is not
    None), without the runtime-protocol machinery, which costs microseconds on every call.
    """
    if getattr(candidate, "get_remaining_time_in_millis", None) is None:
        return None
    return cast(LambdaContextLike, candidate)


def remaining_ms(context: LambdaContextLike | None) -> int | None:
    """Return the context's remaining milliseconds, or None when unknown or unreadable."""
    if context is None:
        return None
    try:
        value = int(context.get_remaining_time_in_millis())
    except (TypeError, ValueError, AttributeError):
        return None
    return max(value, 0)
