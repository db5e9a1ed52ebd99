"""Decisions: one structured log line per decision, and the `decision_hook` that counts them.

A traced call's decisions also go to its span (`idempotent_lambda._tracing`). Only the hashed
key is logged, never the payload or the result.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from typing import Any

logger = logging.getLogger("idempotent_lambda")


class Outcome(str, enum.Enum):
    """What the library decided for one invocation."""

    CLAIMED = "CLAIMED"
    """The key was free: the body ran and its result was stored."""
    TAKEN_OVER = "TAKEN_OVER"
    """A previous holder's lease had passed: this call took over, ran and stored."""
    REPLAYED = "REPLAYED"
    """A stored result was returned without running the body."""
    IN_PROGRESS = "IN_PROGRESS"
    """Another invocation holds the key: `IdempotencyAlreadyInProgressError`."""
    VALIDATION_FAILED = "VALIDATION_FAILED"
    """Same key, different validated payload: `IdempotencyValidationError`."""
    RELEASED = "RELEASED"
    """The body raised; the record was deleted so a retry runs again."""
    RELEASE_FAILED = "RELEASE_FAILED"
    """A release failed (after the body raised, or undoing a failed claim); the record waits
    for its lease to end."""
    LEASE_LOST = "LEASE_LOST"
    """The lease was taken over while the body ran; the newer record was left alone."""
    COMPLETE_FAILED = "COMPLETE_FAILED"
    """The body ran but the store failed to record it; the result was returned anyway."""
    UNSTORABLE = "UNSTORABLE"
    """The body ran but its result cannot be stored; a marker was stored instead."""
    STORE_ERROR = "STORE_ERROR"
    """The store failed before the body ran; the body did not run."""
    SUSPENDED = "SUSPENDED"
    """A durable invocation ended and the execution goes on (a suspension, an error the SDK
    answers by invoking it again): its claim stays."""
    SKIPPED = "SKIPPED"
    """No key material and keys are optional: the body ran without idempotency."""
    DISABLED = "DISABLED"
    """Idempotency is switched off by environment variable."""


_LEVELS = {
    Outcome.LEASE_LOST: logging.WARNING,
    Outcome.SKIPPED: logging.WARNING,
    Outcome.DISABLED: logging.WARNING,
    Outcome.UNSTORABLE: logging.ERROR,
    Outcome.RELEASE_FAILED: logging.ERROR,
    Outcome.COMPLETE_FAILED: logging.ERROR,
    Outcome.STORE_ERROR: logging.ERROR,
}
#: Where the decisions of the call running in this context go besides the log and the hook: its
#: span, while `idempotent_lambda._tracing.traced` runs it; None when it is not traced.
span_of_context: ContextVar[Callable[[Decision], None] | None] = ContextVar(
    "idempotent_lambda_span", default=None
)


class RequestCount:
    """DynamoDB requests sent for one invocation, botocore's retries included (mutable)."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


#: Where the store counts the requests of the store call running in this context: the
#: invocation's `Tally` sets it around each call it yields; None outside one.
requests_of_context: ContextVar[RequestCount | None] = ContextVar(
    "idempotent_lambda_requests", default=None
)
_METHODS = {logging.INFO: "info", logging.WARNING: "warning", logging.ERROR: "error"}
#: The store operation behind outcomes that name one failure (STORE_ERROR passes its own).
_FAILED_OPERATION = {Outcome.COMPLETE_FAILED: "complete", Outcome.RELEASE_FAILED: "release"}


@dataclass(frozen=True, slots=True)
class Decision:
    """One decision, as logged and as passed to ``decision_hook``.

    Attributes:
        outcome: What happened.
        function: The decorated function's qualified name.
        key: The stored (hashed) idempotency key; None when there was none.
        store_ms: Time spent in store calls.
        handler_ms: Time spent in the decorated body; None when it did not run.
        store_calls: Store calls made (a claim, a read, a completion...).
        source: Where a replay came from: ``"store"``, ``"cache"``, ``"wait"`` or
            ``"batch_read"`` (a batch's read of all its keys).
        error: The class name of the store error, when there was one.
        operation: The store operation that failed (``claim``, ``get``, ``complete``,
            ``release``), for STORE_ERROR, COMPLETE_FAILED and RELEASE_FAILED.
        key_source: For SKIPPED, what found no key: ``event_key_jmespath '<expression>'``,
            ``the whole payload``, or an adapter's own source (the HTTP key header).
        execution: The durable execution's ARN, for a durable step's decisions.
        store_requests: DynamoDB requests sent for them, botocore's retries included; a
            request that writes many records' completions counts once, for one of them.
    """

    outcome: Outcome
    function: str
    key: str | None = None
    store_ms: float = 0.0
    handler_ms: float | None = None
    store_calls: int = 0
    source: str | None = None
    error: str | None = None
    operation: str | None = None
    key_source: str | None = None
    execution: str | None = None
    store_requests: int = 0


class Reporter:
    """Log one decorated function's decisions and pass them to its ``decision_hook``.

    Args:
        function_name: Named in every decision.
        hook: ``IdempotencyConfig.decision_hook``; what it raises is logged and swallowed.
        log: ``IdempotencyConfig.logger``: anything with ``info``/``warning``/``error`` taking
            ``extra=`` (a `logging.Logger`, a Powertools ``Logger``); None logs on the
            ``idempotent_lambda`` logger. The fields go in ``extra["idempotency"]``.
        execution: Named in every decision (a durable step's execution ARN).
    """

    def __init__(
        self,
        function_name: str,
        hook: Callable[[Decision], None] | None = None,
        log: Any = None,
        execution: str | None = None,
    ) -> None:
        self.function_name = function_name
        self.execution = execution
        self._hook = hook
        self._log = logger if log is None else log
        self._enabled = getattr(self._log, "isEnabledFor", None)

    def wants(self, outcome: Outcome) -> bool:
        """Tell whether a decision with ``outcome`` would reach anyone (else it is not built)."""
        if self._hook is not None or self._enabled is None or span_of_context.get() is not None:
            return True
        return bool(self._enabled(_LEVELS.get(outcome, logging.INFO)))

    def tally(self, key: str) -> Tally:
        """Start reporting the decisions of one invocation, whose key is ``key``."""
        return Tally(self, key)

    def note(self, outcome: Outcome, key_source: str | None = None) -> None:
        """Report a decision about a call that has no invocation (DISABLED, SKIPPED)."""
        if self.wants(outcome):
            self.send(
                Decision(
                    outcome, self.function_name, key_source=key_source, execution=self.execution
                )
            )

    def send(self, decision: Decision) -> None:
        """Log ``decision``, note it on the call's span and pass it to the hook."""
        level = decision_level(decision.outcome)
        span = span_of_context.get()
        if span is not None:
            span(decision)
        if self._enabled is None or self._enabled(level):
            fields = {k: v for k, v in asdict(decision).items() if v is not None}
            fields["outcome"] = decision.outcome.value
            getattr(self._log, _METHODS[level])(
                "idempotency %s",
                " ".join(f"{k}={_short(v)}" for k, v in fields.items()),
                extra={"idempotency": fields},
            )
        if self._hook is not None:
            try:
                self._hook(decision)
            except Exception:
                self._log.error("idempotency decision_hook raised; ignored", exc_info=True)


class Tally:
    """One invocation's store calls and body time, reported with each of its decisions."""

    __slots__ = ("_reporter", "handler_ms", "key", "requests", "store_calls", "store_ms")

    def __init__(self, reporter: Reporter, key: str) -> None:
        self._reporter = reporter
        self.key = key
        self.store_ms = 0.0
        self.store_calls = 0
        self.requests = RequestCount()
        self.handler_ms: float | None = None  # None until the body has run

    def add_store_call(self, ms: float) -> None:
        """Count one store call that took ``ms`` milliseconds."""
        self.store_ms += ms
        self.store_calls += 1

    def report(
        self,
        outcome: Outcome,
        *,
        source: str | None = None,
        error: str | None = None,
        op: str | None = None,
    ) -> None:
        """Report ``outcome``, with the fields of `Decision` that are not known here."""
        reporter = self._reporter
        if not reporter.wants(outcome):
            return
        reporter.send(
            Decision(
                outcome=outcome,
                function=reporter.function_name,
                key=self.key,
                store_ms=self.store_ms,
                handler_ms=self.handler_ms,
                store_calls=self.store_calls,
                store_requests=self.requests.n,
                source=source,
                error=error,
                operation=op or _FAILED_OPERATION.get(outcome),
                execution=reporter.execution,
            )
        )


def decision_level(outcome: Outcome) -> int:
    """Return the logging level decisions with ``outcome`` are logged at."""
    return _LEVELS.get(outcome, logging.INFO)


def cause_name(exc: BaseException) -> str:
    """Name the error behind ``exc``: its cause's class (a botocore error, say), else its own."""
    cause = exc.__cause__
    return type(cause if cause is not None else exc).__name__


def _short(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)
