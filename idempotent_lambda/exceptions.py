"""Errors raised by idempotent_lambda.

Every error the library raises on its own account derives from `IdempotencyError`:

```text
    IdempotencyError
    ├── IdempotencyConfigError              bad configuration, raised at decoration/construction
    │   ├── IdempotencyModelTypeError              a serializer's model is not what it takes
    │   ├── IdempotencyKeyPrefixNotGrantedError    the key prefix is not the one IAM grants
    │   └── IdempotencyNoSerializationModelError   a serializer class got no model
    ├── IdempotencyKeyError                 key required but absent, or key material not hashable
    ├── IdempotencyValidationError          same key, different validated payload
    ├── IdempotencyAlreadyInProgressError   another invocation holds the key right now
    ├── IdempotencyPersistenceLayerError    the store failed; the store's error is ``__cause__``
    │   ├── IdempotencyItemAlreadyExistsError      Powertools' names, for stores and except
    │   ├── IdempotencyItemNotFoundError           clauses written against Powertools
    │   ├── IdempotencyInconsistentStateError
    │   ├── IdempotencyInvalidStatusError
    │   ├── IdempotencyPersistenceConnectionError
    │   ├── IdempotencyPersistenceConsistencyError
    │   ├── IdempotencyPersistenceConfigError      (also an IdempotencyConfigError)
    │   ├── IdempotencyKeySchemaError           the store is not keyed the way it was configured
    │   ├── IdempotencyWriteConflictError       a global table's other Region wrote the item too
    │   ├── IdempotencyClaimAccessDeniedError   IAM denied the claim of a key prefix
    │   └── IdempotencyCorruptRecordError       a stored record does not follow its format
    ├── IdempotencyUnstorableResultError    the body ran but its result cannot be stored
    ├── MalformedEventError                 an adapter got an event that is not its source's
    ├── MalformedRecordError                one record of a batch is malformed (never raised out)
    └── IdempotencyTransactionError         business writes cannot commit with the record
        └── IdempotencyTransactionConflictError   a business write's condition failed
```

Exceptions raised by the decorated function itself are never wrapped: they propagate unchanged.

Every error is importable from here. Those a handler's caller catches (`IdempotencyError`, the
config, key, validation, in-progress, store, unstorable-result and transaction errors) are also
importable from `idempotent_lambda`, and the transaction errors from
`idempotent_lambda.transaction`; `tests/unit/test_docs_errors_importable.py` checks every error
a docs page names, and every import a page shows.

Every exception class of Powertools' ``idempotency.exceptions`` exists here under its name, placed
so that an ``except`` clause written for Powertools still catches what it meant to; Powertools'
common base ``BaseError`` is `IdempotencyError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


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
    """The persistence store failed; the underlying error is chained as ``__cause__``.

    Attributes:
        error_code: The AWS error code behind it (``"ThrottlingException"``, or botocore's
            exception class name where the service gave none), so a caller can branch on it
            without reading botocore's response; None when no AWS call failed.
    """

    def __init__(self, *args: object, error_code: str | None = None) -> None:
        super().__init__(*args)
        self.error_code = error_code


class IdempotencyWriteConflictError(IdempotencyPersistenceLayerError):
    """A write met a concurrent write of the same item in another Region (MRSC global table).

    DynamoDB answers ``ReplicatedWriteConflictException``. It is contention, not an outage:
    the engine retries the write (within the invocation's time) and then answers a claim as an
    in-progress duplicate would; a completion or release that still conflicts is handled as a
    store failure of that step.
    """


class IdempotencyKeySchemaError(IdempotencyPersistenceLayerError):
    """The store is not keyed the way it was configured, so it would mix up idempotency keys.

    The engine raises it when the store answers one key with the record of another: such a
    record is never replayed, waited on or validated against, and the function does not run.
    `DynamoDBPersistenceLayer` raises it on first use when the table's key schema differs from
    its ``key_attr``/``sort_key_attr`` (for instance ``sort_key_attr`` on a table whose only
    key is ``id``, where every key would share one item).

    A store error rather than an `IdempotencyConfigError`: it is found at the first store call,
    not when the config is built (the config error's promise), and the handling store errors
    already get is the right one: nothing ran, the HTTP adapter answers 503, a batch record is
    reported failed and retried, and all of it stops once the table or the store is fixed.
    """


class IdempotencyCorruptRecordError(IdempotencyPersistenceLayerError):
    """A stored record does not follow its format; the message names the field, never its value.

    Also raised on replay when the stored result is not what the function's return annotation
    (or model serializer) describes; the message then names the types.
    """


class MalformedEventError(IdempotencyError, ValueError):
    """The event is not one the adapter handles: not a mapping, or without its list of records.

    Raised by a batch handler (the only error it raises): such an event means the function is
    wired to the wrong source or invoked by hand, and there is no record to report failed.
    """


class MalformedRecordError(IdempotencyError, ValueError):
    """A batch record lacks a field its source always sends, or holds one of the wrong type.

    Never raised out of a batch handler: the record is reported failed and logged.
    """


class IdempotencyUnstorableResultError(IdempotencyError):
    """The function ran, but its result could not be serialised or was too large to store.

    The record is completed with a marker instead of the result, so every retry until the record
    expires raises this error too rather than running the side effect a second time.
    """


class IdempotencyTransactionError(IdempotencyError):
    """Business writes queued on `idempotent_lambda.transaction.current_transaction` failed.

    Raised when a write is invalid or over the transaction limit (inside the body, as it is
    queued), when the store cannot commit business writes, or when DynamoDB rejects the
    transaction. Whenever it is raised after the body returned, nothing was written: neither the
    business writes nor the COMPLETED record, and the record was released so a retry runs again.
    """


@dataclass(frozen=True, slots=True)
class CancellationReason:
    """Why DynamoDB cancelled one business write of a transaction.

    Attributes:
        index: Position of the write, in the order it was queued.
        operation: ``"Put"``, ``"Update"``, ``"Delete"`` or ``"ConditionCheck"``.
        table: The write's table.
        code: DynamoDB's code: ``"ConditionalCheckFailed"``, ``"None"`` (this write was fine),
            ``"TransactionConflict"``, ...
        message: DynamoDB's message, if any.
        item: The item as it was, in the low-level form, when the write asked for it
            (``return_old_on_failure=True``) and its condition failed.
    """

    index: int
    operation: str
    table: str
    code: str
    message: str | None = None
    item: Mapping[str, Any] | None = None

    @property
    def failed(self) -> bool:
        """Tell whether this write is one that made the transaction fail."""
        return self.code != "None"


class IdempotencyTransactionConflictError(IdempotencyTransactionError):
    """A business write's condition failed, so nothing was written and the record was released.

    Attributes:
        reasons: One `CancellationReason` per business write, in the order they were queued.
    """

    def __init__(self, message: str, *, reasons: tuple[CancellationReason, ...] = ()) -> None:
        super().__init__(message)
        self.reasons = reasons

    @property
    def failed(self) -> tuple[CancellationReason, ...]:
        """Return the reasons of the writes that failed."""
        return tuple(reason for reason in self.reasons if reason.failed)


class IdempotencyKeyPrefixNotGrantedError(IdempotencyConfigError):
    """The key prefix in use is not one the CDK construct granted the function.

    Raised at decoration when `IDEMPOTENT_LAMBDA_GRANTED_KEY_PREFIXES` (set by
    `IdempotencyTable.grant_idempotency`) does not name it: every claim would be denied.

    Attributes:
        key_prefix: The prefix the decorator uses.
        granted: The prefixes the function's IAM policy allows.
    """

    def __init__(self, key_prefix: str, granted: list[str]) -> None:
        self.key_prefix = key_prefix
        self.granted = granted
        super().__init__(
            f"key prefix {key_prefix!r} is not granted to this function: its IAM policy allows "
            f"keys starting with {', '.join(repr(p + '#') for p in granted)} only "
            "(IDEMPOTENT_LAMBDA_GRANTED_KEY_PREFIXES, set by IdempotencyTable.grant_idempotency); "
            "pass the granted key_prefix= to the decorator, or grant this one"
        )


class IdempotencyClaimAccessDeniedError(IdempotencyPersistenceLayerError):
    """IAM denied the claim (`PutItem`) of a key: the function's policy does not cover its prefix.

    Attributes:
        key_prefix: The key prefix of the denied claim.
        table_name: The table.
    """

    def __init__(self, key_prefix: str, table_name: str) -> None:
        self.key_prefix = key_prefix
        self.table_name = table_name
        super().__init__(
            f"AccessDenied claiming a key of prefix {key_prefix!r} in table {table_name!r}: the "
            "function's IAM policy must allow dynamodb:PutItem, GetItem and DeleteItem with the "
            f"condition ForAllValues:StringLike dynamodb:LeadingKeys = {key_prefix + '#*'!r} "
            "(IdempotencyTable.grant_idempotency(function, key_prefix=...) writes it)"
        )


class IdempotencyModelTypeError(IdempotencyConfigError):
    """A serializer was given a model type it cannot handle (Powertools' name)."""


class IdempotencyNoSerializationModelError(IdempotencyConfigError):
    """A model serializer class was given no model: the function has no return annotation."""


class IdempotencyItemAlreadyExistsError(IdempotencyPersistenceLayerError):
    """A live record already holds the key (raised by a store's ``_put_record``).

    Part of the `idempotent_lambda.persistence.base.BasePersistenceLayer` contract; the library
    turns it into a replay or an in-progress answer and never lets it reach the caller.

    Attributes:
        old_data_record: The record that blocked the write, when the store has it at hand.
    """

    def __init__(self, *args: object, old_data_record: Any = None) -> None:
        super().__init__(*args)
        self.old_data_record = old_data_record


class IdempotencyItemNotFoundError(IdempotencyPersistenceLayerError):
    """No record holds the key (raised by a store's ``_get_record``)."""


class IdempotencyInconsistentStateError(IdempotencyPersistenceLayerError):
    """The store's answers contradict each other (a record vanished or expired between them)."""


class IdempotencyInvalidStatusError(IdempotencyPersistenceLayerError):
    """A stored record has a status that is not one of the known ones (a corrupt record)."""


class IdempotencyPersistenceConnectionError(IdempotencyPersistenceLayerError):
    """The store could not be reached."""


class IdempotencyPersistenceConsistencyError(IdempotencyPersistenceLayerError):
    """The store cannot give the consistency the lifecycle needs."""


class IdempotencyPersistenceConfigError(IdempotencyPersistenceLayerError, IdempotencyConfigError):
    """A store was configured with options it does not support (caught as either parent)."""


BaseError = IdempotencyError
"""Powertools' name for the base class of its idempotency errors."""

__all__ = [
    "BaseError",
    "CancellationReason",
    "IdempotencyAlreadyInProgressError",
    "IdempotencyConfigError",
    "IdempotencyError",
    "IdempotencyInconsistentStateError",
    "IdempotencyInvalidStatusError",
    "IdempotencyItemAlreadyExistsError",
    "IdempotencyItemNotFoundError",
    "IdempotencyKeyError",
    "IdempotencyKeySchemaError",
    "IdempotencyModelTypeError",
    "IdempotencyNoSerializationModelError",
    "IdempotencyPersistenceConfigError",
    "IdempotencyPersistenceConnectionError",
    "IdempotencyPersistenceConsistencyError",
    "IdempotencyPersistenceLayerError",
    "IdempotencyTransactionConflictError",
    "IdempotencyTransactionError",
    "IdempotencyUnstorableResultError",
    "IdempotencyValidationError",
]
