"""`IdempotentHookFunction`: the type of ``IdempotencyConfig(response_hook=...)``.

Powertools' module path ``hook``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from idempotent_lambda.record import IdempotencyRecord


class IdempotentHookFunction(Protocol):
    """A response hook: called with each replayed response and its record; returns the response.

    The record is an `IdempotencyRecord`, which has the `DataRecord` names a Powertools hook
    reads (``idempotency_key``, ``status``, ``expiry_timestamp``, ``response_data``,
    ``payload_hash``, ``get_expiration_datetime()``, ``response_json_as_dict()``).
    """

    def __call__(self, response: Any, idempotent_data: IdempotencyRecord) -> Any:
        """Return the response to give the caller instead of ``response``."""
        ...


__all__ = ["IdempotentHookFunction"]
