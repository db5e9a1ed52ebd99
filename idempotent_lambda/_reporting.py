"""One decorated function's decisions, reported with the invocation they were made for.

`Reporter` is the seam the state machine (`idempotent_lambda._engine`) and the recording of
results (`idempotent_lambda._recording`) share: every outcome goes through `Reporter.report`,
and every store call through `Reporter.store`, which reports a failed one as STORE_ERROR.
"""

from __future__ import annotations

from idempotent_lambda._effects import Flow, StoreCall
from idempotent_lambda._identity import Invocation
from idempotent_lambda._observability import Decision, Outcome, audience, report
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import IdempotencyPersistenceLayerError

#: The store operation behind outcomes that name one failure (STORE_ERROR passes its own).
_FAILED_OPERATION = {Outcome.COMPLETE_FAILED: "complete", Outcome.RELEASE_FAILED: "release"}


class Reporter:
    """Report one decorated function's decisions to its ``decision_hook`` and logger."""

    def __init__(self, config: IdempotencyConfig, function_name: str) -> None:
        """Bind the function's name and the config that says where decisions go."""
        self.function_name = function_name
        self._hook = config.decision_hook
        self._log = config.logger
        self.wants = audience(config.decision_hook, config.logger)
        """Tell whether anyone would read a decision with this outcome (skip building it)."""

    def note(self, outcome: Outcome) -> None:
        """Report a decision about a call that has no invocation (DISABLED, SKIPPED)."""
        report(Decision(outcome, self.function_name), self._hook, log=self._log)

    def report(
        self,
        outcome: Outcome,
        inv: Invocation,
        handler_ms: float | None,
        *,
        source: str | None = None,
        error: str | None = None,
        op: str | None = None,
    ) -> None:
        """Report ``outcome`` for ``inv``, with its store tally, when anyone reads it.

        Args:
            outcome: What was decided.
            inv: The invocation it was decided for.
            handler_ms: Time the body ran; None when it did not run.
            source: Where a replay came from.
            error: The class name of the error behind a failure.
            op: The store operation that failed; COMPLETE_FAILED and RELEASE_FAILED imply it.
        """
        if not self.wants(outcome):
            return
        report(
            Decision(
                outcome=outcome,
                function=self.function_name,
                key=inv.key,
                store_ms=inv.tally.ms,
                handler_ms=handler_ms,
                store_calls=inv.tally.calls,
                source=source,
                error=error,
                operation=op or _FAILED_OPERATION.get(outcome),
            ),
            self._hook,
            log=self._log,
        )

    def store(self, inv: Invocation, call: StoreCall, *, report_errors: bool = True) -> Flow:
        """Yield ``call``; a store failure is reported as STORE_ERROR when ``report_errors``."""
        try:
            return (yield call)
        except IdempotencyPersistenceLayerError as exc:
            if report_errors:
                self.report(
                    Outcome.STORE_ERROR, inv, None, error=cause_name(exc), op=call.operation
                )
            raise


def cause_name(exc: BaseException) -> str:
    """Name the error behind ``exc``: its cause's class (a botocore error, say), else its own."""
    cause = exc.__cause__
    return type(cause if cause is not None else exc).__name__
