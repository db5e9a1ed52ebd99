"""The store Protocol every persistence layer implements, and the rules they share.

Powertools' names at this path are here too: `BasePersistenceLayer`, the base class of stores
written against Powertools' contract (see `idempotent_lambda.persistence._powertools_layer`),
and `DataRecord`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from idempotent_lambda.exceptions import (
    IdempotencyItemAlreadyExistsError,
    IdempotencyKeyError,
    IdempotencyValidationError,
)
from idempotent_lambda.persistence.protocol import (
    DEFAULT_COMPRESSION_THRESHOLD_BYTES,
    MAX_STORED_DATA_BYTES,
    MAX_TRANSACTION_WRITES,
    POWERTOOLS_IN_PROGRESS,
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

if TYPE_CHECKING:  # re-exported (explicitly, for mypy); imported on first use by __getattr__
    from idempotent_lambda.persistence._powertools_layer import (
        BasePersistenceLayer as BasePersistenceLayer,  # noqa: PLC0414
    )
    from idempotent_lambda.persistence.datarecord import (
        STATUS_CONSTANTS as STATUS_CONSTANTS,  # noqa: PLC0414
    )
    from idempotent_lambda.persistence.datarecord import DataRecord as DataRecord  # noqa: PLC0414


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


def __getattr__(name: str) -> Any:
    # Powertools' names at Powertools' path, imported on first use: their module builds on this one.
    if name == "BasePersistenceLayer":
        from idempotent_lambda.persistence._powertools_layer import BasePersistenceLayer

        return BasePersistenceLayer
    if name in {"DataRecord", "STATUS_CONSTANTS"}:
        from idempotent_lambda.persistence import datarecord

        return getattr(datarecord, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
