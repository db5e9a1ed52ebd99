"""Powertools' module path ``persistence.datarecord``: `DataRecord` and `STATUS_CONSTANTS`.

The library's own record type is `idempotent_lambda.record.IdempotencyRecord`.
"""

from __future__ import annotations

from idempotent_lambda._record_format import STATUS_CONSTANTS
from idempotent_lambda.persistence._powertools_layer import DataRecord

__all__ = ["STATUS_CONSTANTS", "DataRecord"]
