"""Errors raised by idempotent_lambda.

Every error the library raises on its own account derives from `IdempotencyError`::

    IdempotencyError
    ├── IdempotencyConfigError              bad configuration, raised at decoration/construction
    ├── IdempotencyKeyError                 key required but absent, or key material not hashable
    ├── IdempotencyValidationError          same key, different validated payload
    ├── IdempotencyAlreadyInProgressError   another invocation holds the key right now
    ├── IdempotencyPersistenceLayerError    the store failed; the store's error is ``__cause__``
    └── IdempotencyUnstorableResultError    the body ran but its result cannot be stored

Exceptions raised by the decorated function itself are never wrapped: they propagate unchanged.
"""

from __future__ import annotations


class IdempotencyError(Exception):
    """Base class of every error this library raises."""


class IdempotencyConfigError(IdempotencyError):
    """The configuration is invalid; raised when the config or decorator is built."""


class IdempotencyKeyError(IdempotencyError):
    """The idempotency key could not be derived from the payload."""


class IdempotencyValidationError(IdempotencyError):
    """A request reused a key with a payload that differs in its validated part."""


class IdempotencyAlreadyInProgressError(IdempotencyError):
    """Another invocation holds the key and has not finished yet.

    Attributes:
        lease_expires_at_ms: Epoch milliseconds at which the holder's lease ends, when known.
    """

    def __init__(self, message: str, *, lease_expires_at_ms: int | None = None) -> None:
        super().__init__(message)
        self.lease_expires_at_ms = lease_expires_at_ms


class IdempotencyPersistenceLayerError(IdempotencyError):
    """The persistence store failed; the underlying error is chained as ``__cause__``."""


class IdempotencyUnstorableResultError(IdempotencyError):
    """The function ran, but its result could not be serialised or was too large to store.

    The record is completed with a marker instead of the result, so every retry until the record
    expires raises this error too rather than running the side effect a second time.
    """


__all__ = [
    "IdempotencyAlreadyInProgressError",
    "IdempotencyConfigError",
    "IdempotencyError",
    "IdempotencyKeyError",
    "IdempotencyPersistenceLayerError",
    "IdempotencyUnstorableResultError",
    "IdempotencyValidationError",
]
