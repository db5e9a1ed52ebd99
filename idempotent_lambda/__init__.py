"""Make AWS Lambda handlers safe to retry.

Decorate a handler (`idempotent`) or any function (`idempotent_function`): the body runs once per
logical request, identified by a key derived from the payload, and every retry gets the stored
result back. Records live in DynamoDB (`DynamoDBPersistenceLayer`) or, for tests and local runs,
in memory (`InMemoryPersistenceLayer`). Switching from Powertools' Idempotency utility is a change
of import line.
"""

from idempotent_lambda._observability import Decision, Outcome
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.decorators import idempotent, idempotent_function
from idempotent_lambda.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyConfigError,
    IdempotencyError,
    IdempotencyKeyError,
    IdempotencyPersistenceLayerError,
    IdempotencyUnstorableResultError,
    IdempotencyValidationError,
)
from idempotent_lambda.persistence.base import PersistenceStore
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.persistence.in_memory import InMemoryPersistenceLayer
from idempotent_lambda.record import IdempotencyRecord, Status

__version__ = "0.1.0"

__all__ = [
    "Decision",
    "DynamoDBPersistenceLayer",
    "IdempotencyAlreadyInProgressError",
    "IdempotencyConfig",
    "IdempotencyConfigError",
    "IdempotencyError",
    "IdempotencyKeyError",
    "IdempotencyPersistenceLayerError",
    "IdempotencyRecord",
    "IdempotencyUnstorableResultError",
    "IdempotencyValidationError",
    "InMemoryPersistenceLayer",
    "Outcome",
    "PersistenceStore",
    "Status",
    "idempotent",
    "idempotent_function",
]
