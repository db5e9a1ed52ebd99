"""The Lambda context of the invocation: bound for a call, or registered for the process.

The decorators and adapters bind the context they are given for the duration of a handler call
(`current_lambda_context`, a ContextVar), so an `idempotent_function` nested inside sees the
invocation's remaining time without user code. A ContextVar does not reach threads the handler
starts (a ``ThreadPoolExecutor`` does not copy it), so ``config.register_lambda_context`` keeps
the context process-wide instead (`register`): Lambda runs one invocation at a time per process,
so the registered context is the running invocation's from any thread. Where a context is bound,
it wins over the registration (concurrent handlers in one process, as in tests).
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


class _Registration:
    """The context registered for the process (one attribute, so no ``global`` statement)."""

    context: LambdaContextLike | None = None


def register(context: Any) -> None:
    """Make ``context`` the one every thread falls back on; None (or a non-context) forgets it."""
    _Registration.context = as_lambda_context(context)


def fallback_context(configured: Any) -> LambdaContextLike | None:
    """Return the registered context, else ``configured``: the first with time left.

    One left over from an earlier invocation, its deadline passed, would make a lease that
    has already ended, so it is skipped.
    """
    for candidate in (_Registration.context, as_lambda_context(configured)):
        left = remaining_ms(candidate)
        if left is not None and left > 0:
            return candidate
    return None


def as_lambda_context(candidate: Any) -> LambdaContextLike | None:
    """Return ``candidate`` if it has the Lambda context's method, else None."""
    # Asked directly: isinstance through the runtime Protocol costs 9 µs a call, this 0.3 µs.
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
