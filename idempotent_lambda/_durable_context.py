"""Recognise a durable execution's context without importing the SDK.

`aws-durable-execution-sdk-python` hands a ``@durable_execution`` handler a ``DurableContext``
instead of a Lambda context. The decorators read only its public surface
(``execution_context.durable_execution_arn``, ``lambda_context``, ``is_replaying()``), so the
library runs with or without the SDK installed, and with stand-ins that have that surface.
"""

from __future__ import annotations

import contextvars
import hashlib
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

#: The longest a durable execution may run (its ExecutionTimeout is at most 366 days): the lease
#: of a durable handler's claim when ``in_progress_expiry_seconds`` does not set a shorter one.
DURABLE_LEASE_SECONDS = 366 * 24 * 3600

_SDK_EXCEPTIONS = "aws_durable_execution_sdk_python.exceptions"
#: The ``DurableContext`` of the durable handler or step running in this thread or task.
_running: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "idempotent_lambda_durable_context", default=None
)
#: The releases `idempotent_lambda.durable.ClaimsPlugin` holds until its invocation's final
#: status is known; None when no such plugin serves the invocation running in this context.
_held: contextvars.ContextVar[list[Callable[[bool], None]] | None] = contextvars.ContextVar(
    "idempotent_lambda_durable_held_releases", default=None
)


class DurableRun(NamedTuple):
    """The durable execution a handler call belongs to.

    Attributes:
        arn: The durable execution's ARN, the same in every invocation of the execution.
        lambda_context: The invocation's own Lambda context (its deadline), if any.
        replaying: The invocation replays operations that an earlier one checkpointed.
    """

    arn: str
    lambda_context: Any
    replaying: bool

    @property
    def owner(self) -> str:
        """Return the owner token of the execution's claims: one value in every invocation.

        A replay of the execution meets its own claim and goes on; another execution, with
        another ARN, meets a claim it does not own.
        """
        return hashlib.sha256(f"durable-execution\n{self.arn}".encode()).hexdigest()[:32]


def durable_run_of(context: Any) -> DurableRun | None:
    """Return the durable execution ``context`` belongs to; None for any other context."""
    execution = getattr(context, "execution_context", None)
    arn = getattr(execution, "durable_execution_arn", None)
    if not isinstance(arn, str) or not arn:
        return None
    replaying = getattr(context, "is_replaying", None)
    return DurableRun(
        arn, getattr(context, "lambda_context", None), bool(callable(replaying) and replaying())
    )


def enter_durable(context: Any) -> contextvars.Token[Any]:
    """Mark ``context`` as the durable context of the body about to run (see `keeps_claim`)."""
    return _running.set(context)


def leave_durable(token: contextvars.Token[Any]) -> None:
    """Undo `enter_durable`."""
    _running.reset(token)


def in_durable() -> bool:
    """Tell whether a durable handler or step is running in this thread or task."""
    return _running.get() is not None


def keeps_claim(error: BaseException) -> bool:
    """Tell whether a body that raised ``error`` keeps its claim instead of releasing it.

    Outside a durable execution only the SDK's suspension keeps it. Inside one (DESIGN §13) the
    claim lives as long as the execution: only an error that the SDK answers by failing the
    execution releases it (`ends_execution`). Everything it answers by invoking the execution
    again keeps it.
    """
    context = _running.get()
    if context is None:
        return is_suspension(error)
    return not ends_execution(error, context)


def hold_release(settle: Callable[[bool], None], owner: str | None) -> bool:
    """Leave a released claim's fate to the invocation's final status, when a plugin waits for it.

    With `idempotent_lambda.durable.ClaimsPlugin` registered, the release of a claim of the
    durable execution itself (``owner`` is the execution's, `DurableRun.owner`) whose body
    raised an execution-ending error waits for the invocation to end: ``settle(True)`` then
    releases it (the execution is over), ``settle(False)`` keeps it (the SDK answered PENDING
    or RETRY, so the execution goes on). Returns False, holding nothing, when no plugin serves
    this invocation, or the claim is one invocation's (a step's, a nested function's): no
    other execution can need those, and holding one would only stall this execution's retry.
    """
    held = _held.get()
    run = durable_run_of(_running.get())
    if held is None or run is None or run.owner != owner:
        return False
    held.append(settle)
    return True


def start_holding() -> contextvars.Token[list[Callable[[bool], None]] | None]:
    """Make `hold_release` hold releases for the invocation about to run in this context."""
    return _held.set([])


def stop_holding(
    token: contextvars.Token[list[Callable[[bool], None]] | None],
) -> list[Callable[[bool], None]]:
    """Undo `start_holding`; return the releases held since, in the order they were held."""
    held = _held.get() or []
    try:
        _held.reset(token)
    except ValueError:  # another context: hold nothing more in this one
        _held.set(None)
    return held


def ends_execution(error: BaseException, context: Any) -> bool:
    """Tell whether the SDK ends the execution (FAILED) when its handler raises ``error``.

    Mirrors ``durable_execution``'s answer, read from the SDK's public exception types:

    - after the service revoked the invocation's checkpoint token
      (``context.state.is_checkpoint_token_revoked``), any error ends the invocation as
      PENDING: the execution goes on;
    - ``SuspendExecution`` and every other `BaseException` that is not an `Exception` (among
      them an unknown one) end only the invocation; ``BackgroundThreadError`` fails the
      execution only for a non-retryable ``BotoClientError`` of the checkpoint thread;
    - an ``InvocationError`` (``CheckpointError``, ``RetryableSerDesError``,
      ``StepInterruptedError``...) fails the execution only when ``is_retryable()`` is False;
    - any other `Exception` (the handler's own, ``ExecutionError``) fails it.

    Without the SDK loaded (a stand-in context) an `Exception` ends it and nothing else does.
    """
    state = getattr(context, "state", None)
    if getattr(state, "is_checkpoint_token_revoked", False) is True:
        return False
    sdk = sys.modules.get(_SDK_EXCEPTIONS)
    if sdk is None:
        return isinstance(error, Exception)
    if isinstance(error, sdk.BackgroundThreadError):
        source = error.source_exception
        return isinstance(source, sdk.BotoClientError) and not source.is_retryable()
    if not isinstance(error, Exception):
        return False
    if isinstance(error, sdk.InvocationError):
        return not error.is_retryable()
    return True


def is_suspension(error: BaseException) -> bool:
    """Tell whether ``error`` is the SDK suspending the execution (a wait, a callback, a retry).

    The invocation ends there and a later one replays the execution: the claim stays. Without
    the SDK loaded no error can be one.
    """
    module = sys.modules.get(_SDK_EXCEPTIONS)
    suspend = getattr(module, "SuspendExecution", None)
    return isinstance(suspend, type) and isinstance(error, suspend)
