"""Persistence stores: where idempotency records live.

Stores are deliberately dumb: they persist records and enforce the conditional writes. Hashing,
JMESPath, caching and payload validation live in the engine.
"""

from idempotent_lambda.persistence.base import ClaimOutcome, PersistenceStore
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.persistence.in_memory import InMemoryPersistenceLayer

__all__ = [
    "ClaimOutcome",
    "DynamoDBPersistenceLayer",
    "InMemoryPersistenceLayer",
    "PersistenceStore",
]
