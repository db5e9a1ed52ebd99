"""Powertools' module path ``persistence.base``: `BasePersistenceLayer`, `DataRecord` and the rest.

Thin re-exports: the store Protocol is `idempotent_lambda.persistence.protocol`, Powertools-style
stores are `idempotent_lambda.persistence._powertools_layer`.
"""

from __future__ import annotations

from idempotent_lambda._record_format import POWERTOOLS_IN_PROGRESS, STATUS_CONSTANTS
from idempotent_lambda.exceptions import (
    IdempotencyItemAlreadyExistsError,
    IdempotencyKeyError,
    IdempotencyValidationError,
)
from idempotent_lambda.persistence._powertools_layer import BasePersistenceLayer, DataRecord
from idempotent_lambda.persistence.protocol import (
    DEFAULT_COMPRESSION_THRESHOLD_BYTES,
    MAX_STORED_DATA_BYTES,
    MAX_TRANSACTION_WRITES,
    BatchReadStore,
    ClaimOutcome,
    PersistenceStore,
    TransactionalStore,
    TransactItem,
    claim_allowed,
    decode_stored_data,
    encode_stored_data,
    store_for_format,
    transactional,
)

__all__ = [
    "DEFAULT_COMPRESSION_THRESHOLD_BYTES",
    "MAX_STORED_DATA_BYTES",
    "MAX_TRANSACTION_WRITES",
    "POWERTOOLS_IN_PROGRESS",
    "STATUS_CONSTANTS",
    "BasePersistenceLayer",
    "BatchReadStore",
    "ClaimOutcome",
    "DataRecord",
    "IdempotencyItemAlreadyExistsError",
    "IdempotencyKeyError",
    "IdempotencyValidationError",
    "PersistenceStore",
    "TransactItem",
    "TransactionalStore",
    "claim_allowed",
    "decode_stored_data",
    "encode_stored_data",
    "store_for_format",
    "transactional",
]
