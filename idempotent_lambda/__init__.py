"""Make AWS Lambda handlers safe to retry.

Decorate a handler (`idempotent`) or any function (`idempotent_function`): the body runs once per
logical request, identified by a key derived from the payload, and every retry gets the stored
result back. Records live in DynamoDB (`DynamoDBPersistenceLayer`) or, for tests and local runs,
in memory (`InMemoryPersistenceLayer`). Switching from Powertools' Idempotency utility is a change
of import line.

Names are imported on first use, so ``import idempotent_lambda`` costs next to nothing on a cold
start and nothing heavy (boto3, pydantic) is imported until a store actually talks to DynamoDB.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from idempotent_lambda._observability import Decision, Outcome
    from idempotent_lambda.config import IdempotencyConfig, IdempotencyFunctions
    from idempotent_lambda.decorators import idempotent, idempotent_function
    from idempotent_lambda.exceptions import (
        IdempotencyAlreadyInProgressError,
        IdempotencyConfigError,
        IdempotencyError,
        IdempotencyKeyError,
        IdempotencyPersistenceLayerError,
        IdempotencyTransactionConflictError,
        IdempotencyTransactionError,
        IdempotencyUnstorableResultError,
        IdempotencyValidationError,
    )
    from idempotent_lambda.hook import IdempotentHookFunction
    from idempotent_lambda.persistence.base import BasePersistenceLayer, PersistenceStore
    from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
    from idempotent_lambda.persistence.in_memory import InMemoryPersistenceLayer
    from idempotent_lambda.record import IdempotencyRecord, Status

__version__ = "0.1.0"

_EXCEPTIONS = "idempotent_lambda.exceptions"
_WHERE = {
    "BasePersistenceLayer": "idempotent_lambda.persistence.base",
    "Decision": "idempotent_lambda._observability",
    "DynamoDBPersistenceLayer": "idempotent_lambda.persistence.dynamodb",
    "IdempotencyAlreadyInProgressError": _EXCEPTIONS,
    "IdempotencyConfig": "idempotent_lambda.config",
    "IdempotencyConfigError": _EXCEPTIONS,
    "IdempotencyError": _EXCEPTIONS,
    "IdempotencyFunctions": "idempotent_lambda.config",
    "IdempotencyKeyError": _EXCEPTIONS,
    "IdempotencyPersistenceLayerError": _EXCEPTIONS,
    "IdempotencyRecord": "idempotent_lambda.record",
    "IdempotencyTransactionConflictError": _EXCEPTIONS,
    "IdempotencyTransactionError": _EXCEPTIONS,
    "IdempotencyUnstorableResultError": _EXCEPTIONS,
    "IdempotencyValidationError": _EXCEPTIONS,
    "IdempotentHookFunction": "idempotent_lambda.hook",
    "InMemoryPersistenceLayer": "idempotent_lambda.persistence.in_memory",
    "Outcome": "idempotent_lambda._observability",
    "PersistenceStore": "idempotent_lambda.persistence.base",
    "Status": "idempotent_lambda.record",
    "idempotent": "idempotent_lambda.decorators",
    "idempotent_function": "idempotent_lambda.decorators",
}

__all__ = [
    "BasePersistenceLayer",
    "Decision",
    "DynamoDBPersistenceLayer",
    "IdempotencyAlreadyInProgressError",
    "IdempotencyConfig",
    "IdempotencyConfigError",
    "IdempotencyError",
    "IdempotencyFunctions",
    "IdempotencyKeyError",
    "IdempotencyPersistenceLayerError",
    "IdempotencyRecord",
    "IdempotencyTransactionConflictError",
    "IdempotencyTransactionError",
    "IdempotencyUnstorableResultError",
    "IdempotencyValidationError",
    "IdempotentHookFunction",
    "InMemoryPersistenceLayer",
    "Outcome",
    "PersistenceStore",
    "Status",
    "idempotent",
    "idempotent_function",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'idempotent_lambda' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
