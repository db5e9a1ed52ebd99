"""Replaying a stored result: check the payload, then turn the record back into the answer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from idempotent_lambda._identity import Invocation
from idempotent_lambda._observability import Outcome
from idempotent_lambda._reporting import Reporter
from idempotent_lambda._result_codec import UNSTORABLE_START, unstorable_reason
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import (
    IdempotencyPersistenceLayerError,
    IdempotencyUnstorableResultError,
    IdempotencyValidationError,
)
from idempotent_lambda.record import IdempotencyRecord
from idempotent_lambda.serialization import NoOpSerializer


class Replayer:
    """Answer a call from a COMPLETED record, as the first call's result would have been."""

    def __init__(
        self,
        config: IdempotencyConfig,
        serializer: Any,
        on_replay: Callable[[Any, IdempotencyRecord], Any] | None,
        reporter: Reporter,
    ) -> None:
        """Bind the decoding of results and the hooks applied to replayed ones.

        Args:
            config: Gives the record format's decoder and ``response_hook``.
            serializer: Its ``from_dict`` rebuilds the stored value (skipped for the no-op one).
            on_replay: Adapters' hook, applied after ``config.response_hook``.
            reporter: Where REPLAYED and VALIDATION_FAILED are reported.
        """
        self._decode_result = config.format.decode_result
        self._rebuild = None if type(serializer) is NoOpSerializer else serializer.from_dict
        self._response_hook = config.response_hook
        self._on_replay = on_replay
        self._reporter = reporter

    def validate(self, record: IdempotencyRecord, inv: Invocation) -> None:
        """Raise `IdempotencyValidationError` if ``record`` was stored for another payload."""
        if inv.payload_hash is not None and record.payload_hash != inv.payload_hash:
            self._reporter.report(Outcome.VALIDATION_FAILED, inv, None)
            raise IdempotencyValidationError(
                "the payload differs from the one first sent with this idempotency key"
            )

    def replay(self, record: IdempotencyRecord, inv: Invocation, source: str) -> Any:
        """Return the result stored in ``record``; ``source`` says where the record came from.

        Raises:
            IdempotencyUnstorableResultError: The record holds the marker of a result that
                could not be stored.
            IdempotencyPersistenceLayerError: The record holds no result at all.
        """
        reporter = self._reporter
        if reporter.wants(Outcome.REPLAYED):  # the commonest decision: skip the call when unheard
            reporter.report(Outcome.REPLAYED, inv, None, source=source)
        data = record.response_data
        if data is None:
            raise IdempotencyPersistenceLayerError("a COMPLETED record holds no result")
        reason = unstorable_reason(data) if data.startswith(UNSTORABLE_START) else None
        if reason is not None:
            raise IdempotencyUnstorableResultError(
                f"the first call ran, but its result could not be stored: {reason}"
            )
        response = self._decode_result(data)
        if self._rebuild is not None:
            response = self._rebuild(response)
        if self._response_hook is not None:
            response = self._response_hook(response, record)
        if self._on_replay is not None:
            response = self._on_replay(response, record)
        return response
