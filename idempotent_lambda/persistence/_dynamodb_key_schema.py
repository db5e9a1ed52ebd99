"""Tell a DynamoDB table keyed differently from its store, once, with a message that says how.

Two misconfigurations, and how each shows:

- The store writes a key attribute the table lacks, or lacks one the table has (no
  ``sort_key_attr`` on a table with a sort key, another ``key_attr``, a non-string key type):
  DynamoDB refuses the very first request with a ``ValidationException`` ("Missing the key sk
  in the item", "Type mismatch for key", "The provided key element does not match the
  schema"; some emulators just say "Validation Exception"). `KeySchemaCheck.explain` then
  describes the table, once, and raises `IdempotencyKeySchemaError` saying how it is keyed; no
  request is added on the normal path.
- ``sort_key_attr`` on a table whose only key is ``key_attr``: ``PutItem`` accepts the extra
  attribute, so every key silently lands on one item. Nothing on the normal path reveals it
  until a second key meets the first one's item. So in composite-key mode the store makes one
  ``DescribeTable`` on first use, per store instance (`KeySchemaCheck.before`).

``DescribeTable`` is optional in IAM: when it fails for any reason (access denied, throttled)
the check is skipped, logged at DEBUG, and not tried again by that store. The engine still
refuses any record whose key is not the one it asked for, so nothing is ever replayed to the
wrong key; without the permission a composite-key store on a one-key table processes its first
key and then raises `IdempotencyKeySchemaError` for every other one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from idempotent_lambda.exceptions import IdempotencyKeySchemaError
from idempotent_lambda.persistence._dynamodb_item import ItemSchema

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

logger = logging.getLogger(__name__)

#: Fragments of DynamoDB's ValidationException messages that mean a key does not fit the table.
_KEY_SCHEMA_MESSAGES = (
    "missing the key",
    "key element does not match the schema",
    "type mismatch for key",
)


class KeySchemaCheck:
    """Check, once per store, that a table is keyed on the attributes the store writes.

    Args:
        schema: The store's item layout (``key_attr``, ``sort_key_attr``).
        table_name: The table.
    """

    def __init__(self, schema: ItemSchema, table_name: str) -> None:
        self._schema = schema
        self.table_name = table_name
        self._lock = threading.Lock()
        self._described = False
        self._table_keys: dict[str, tuple[str, str]] | None = None  # KeyType -> (name, type)
        # Only composite-key mode needs a look at the table before its first request.
        self._checked = schema.sort_key_attr is None
        self._mismatch: str | None = None

    def before(self, client: DynamoDBClient) -> None:
        """Raise a mismatch already known; in composite-key mode, check the table on first use.

        Raises:
            IdempotencyKeySchemaError: The table's key schema differs from the store's.
        """
        if not self._checked:
            with self._lock:
                if not self._checked:
                    self._mismatch = self._compare(self._describe(client))
                    self._checked = True
        if self._mismatch is not None:
            raise IdempotencyKeySchemaError(self._mismatch)

    def explain(self, client: DynamoDBClient, operation: str, error: Mapping[str, Any]) -> None:
        """Raise `IdempotencyKeySchemaError` if the ``ValidationException`` ``error`` is one.

        The first ``ValidationException`` a store meets has the table described (once, failure
        tolerant): a mismatch found there is named and remembered, so later calls raise without
        a request. Without a description, DynamoDB's own message decides.

        Args:
            client: The store's client.
            operation: The API operation that failed.
            error: The ``Error`` of DynamoDB's answer (``Code``, ``Message``).
        """
        if error.get("Code") != "ValidationException":
            return
        with self._lock:
            mismatch = self._compare(self._describe(client))
            if mismatch is not None:
                self._mismatch = mismatch
        if mismatch is not None:
            raise IdempotencyKeySchemaError(mismatch)
        said = str(error.get("Message", ""))
        if any(fragment in said.lower() for fragment in _KEY_SCHEMA_MESSAGES):
            raise IdempotencyKeySchemaError(
                f"DynamoDB table {self.table_name!r} is not keyed the way the store was built "
                f"({self._configured()}): {operation} was refused with {said!r}"
            )

    def _describe(self, client: DynamoDBClient) -> dict[str, tuple[str, str]] | None:
        """Return the table's key attributes by key type, described once; None if unknown."""
        if not self._described:
            self._described = True
            try:
                table = client.describe_table(TableName=self.table_name)["Table"]
            except Exception as exc:  # optional in IAM: any failure only skips the check
                logger.debug(
                    "key schema of %s not checked: DescribeTable failed (%s)",
                    self.table_name,
                    type(exc).__name__,
                )
                return None
            types = {a["AttributeName"]: a["AttributeType"] for a in table["AttributeDefinitions"]}
            self._table_keys = {
                k["KeyType"]: (k["AttributeName"], types.get(k["AttributeName"], "?"))
                for k in table["KeySchema"]
            }
        return self._table_keys

    def _compare(self, table_keys: dict[str, tuple[str, str]] | None) -> str | None:
        """Return the message naming the mismatch, or None when the keys agree (or are unknown)."""
        if table_keys is None:
            return None
        schema = self._schema
        wanted = {"HASH": (schema.key_attr, "S")}
        if schema.sort_key_attr is not None:
            wanted["RANGE"] = (schema.sort_key_attr, "S")
        if wanted == table_keys:
            return None
        keyed_on = ", ".join(
            f"{name} ({kind}, type {attribute_type})"
            for kind, (name, attribute_type) in sorted(table_keys.items())
        )
        return (
            f"DynamoDB table {self.table_name!r} is keyed on {keyed_on}, but the store was built "
            f"with {self._configured()}: pass the table's partition key as key_attr and its "
            "sort key, if any, as sort_key_attr (both of type S); until then no record is read "
            "or written"
        )

    def _configured(self) -> str:
        schema = self._schema
        sort_key = (
            f"sort_key_attr={schema.sort_key_attr!r}"
            if schema.sort_key_attr is not None
            else "no sort_key_attr"
        )
        return f"key_attr={schema.key_attr!r} and {sort_key}"
