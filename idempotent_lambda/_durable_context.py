"""Recognise a durable execution's context without importing the SDK.

`aws-durable-execution-sdk-python` hands a ``@durable_execution`` handler a ``DurableContext``
instead of a Lambda context. The decorators read only its public surface
(``execution_context.durable_execution_arn``, ``lambda_context``, ``is_replaying()``), so the
library runs with or without the SDK installed, and with stand-ins that have that surface.
"""

from __future__ import annotations

import hashlib
import sys
from typing import Any, NamedTuple

#: The longest a durable execution may run (its ExecutionTimeout is at most 366 days): the lease
#: of a durable handler's claim when ``in_progress_expiry_seconds`` does not set a shorter one.
DURABLE_LEASE_SECONDS = 366 * 24 * 3600

_SDK_EXCEPTIONS = "aws_durable_execution_sdk_python.exceptions"


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


def is_suspension(error: BaseException) -> bool:
    """Tell whether ``error`` is the SDK suspending the execution (a wait, a callback, a retry).

    The invocation ends there and a later one replays the execution: the claim stays. Without
    the SDK loaded no error can be one.
    """
    module = sys.modules.get(_SDK_EXCEPTIONS)
    suspend = getattr(module, "SuspendExecution", None)
    return isinstance(suspend, type) and isinstance(error, suspend)
