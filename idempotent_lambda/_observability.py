"""Decision records: one structured log line per decision, and the metrics hook.

Only the hashed key is logged — never the payload or the result.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
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
    """The body raised and the release failed too; the record waits for its lease to end."""
    LEASE_LOST = "LEASE_LOST"
    """The lease was taken over while the body ran; the newer record was left alone."""
    COMPLETE_FAILED = "COMPLETE_FAILED"
    """The body ran but the store failed to record it; the result was returned anyway."""
    UNSTORABLE = "UNSTORABLE"
    """The body ran but its result cannot be stored; a marker was stored instead."""
    STORE_ERROR = "STORE_ERROR"
    """The store failed before the body ran; the body did not run."""
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


@dataclass(frozen=True, slots=True)
class Decision:
    """One decision, as logged and as passed to ``decision_hook``.

    Attributes:
        outcome: What happened.
        function: The decorated function's qualified name.
        key: The stored (hashed) idempotency key; None when there was none.
        store_ms: Time spent in store calls.
        handler_ms: Time spent in the decorated body; None when it did not run.
        store_calls: Round trips made to the store.
        source: Where a replay came from: ``"store"``, ``"cache"``, ``"wait"`` or
            ``"batch_read"`` (a batch's read of all its keys).
        error: The class name of the store error, when there was one.
        operation: The store operation that failed (``claim``, ``get``, ``complete``,
            ``release``), for STORE_ERROR, COMPLETE_FAILED and RELEASE_FAILED.
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


_METHODS = {logging.INFO: "info", logging.WARNING: "warning", logging.ERROR: "error"}


def audience(hook: Callable[[Decision], None] | None, log: Any = None) -> Callable[[Outcome], bool]:
    """Return a test of whether a decision would reach anyone: a hook, or an enabled logger.

    Built once per decorated function, so the hot path skips building the `Decision` when
    nobody reads it at the cost of one call. The logger's level is still asked every time.
    """
    target = logger if log is None else log
    enabled = getattr(target, "isEnabledFor", None)
    if hook is not None or enabled is None:
        return _always
    levels = _LEVELS

    def logged(outcome: Outcome) -> bool:
        return bool(enabled(levels.get(outcome, logging.INFO)))

    return logged


def _always(outcome: Outcome) -> bool:
    return True


def report(decision: Decision, hook: Callable[[Decision], None] | None, *, log: Any = None) -> None:
    """Log ``decision`` and pass it to ``hook``.

    Args:
        decision: What was decided.
        hook: ``IdempotencyConfig.decision_hook``.
        log: ``IdempotencyConfig.logger``: a `logging.Logger` or a Powertools ``Logger`` (any
            object with ``info``/``warning``/``error`` taking ``extra=``); None logs on the
            ``idempotent_lambda`` logger. The structured fields go in ``extra["idempotency"]``.
    """
    target = logger if log is None else log
    level = _LEVELS.get(decision.outcome, logging.INFO)
    enabled = getattr(target, "isEnabledFor", None)
    if enabled is None or enabled(level):
        fields = {k: v for k, v in asdict(decision).items() if v is not None}
        fields["outcome"] = decision.outcome.value
        getattr(target, _METHODS[level])(
            "idempotency %s",
            " ".join(f"{k}={_short(v)}" for k, v in fields.items()),
            extra={"idempotency": fields},
        )
    if hook is not None:
        try:
            hook(decision)
        except Exception:
            target.error("idempotency decision_hook raised; ignored", exc_info=True)


def _short(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)
