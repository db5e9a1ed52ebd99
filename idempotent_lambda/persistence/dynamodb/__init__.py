"""The DynamoDB store, `DynamoDBPersistenceLayer`, at the path Powertools users import it from.

The package: `_store` (the store and its operations), `_schema` (a record as an item, and the
table's key schema check), `_transaction` (writes committed with the record), `_s3` (results
offloaded to S3) and `_operator` (the CLI's methods, and creating a table).
"""

from idempotent_lambda._grant import large_result_prefix
from idempotent_lambda.exceptions import (
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
    IdempotencyValidationError,
)
from idempotent_lambda.persistence._powertools_layer import BasePersistenceLayer
from idempotent_lambda.persistence.datarecord import STATUS_CONSTANTS, DataRecord
from idempotent_lambda.persistence.dynamodb._store import DynamoDBPersistenceLayer

# Powertools' module keeps these names here too; a literal import swap finds them.
__all__ = [
    "STATUS_CONSTANTS",
    "BasePersistenceLayer",
    "DataRecord",
    "DynamoDBPersistenceLayer",
    "IdempotencyItemAlreadyExistsError",
    "IdempotencyItemNotFoundError",
    "IdempotencyValidationError",
    "large_result_prefix",
]
