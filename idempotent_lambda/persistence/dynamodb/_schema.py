"""A record as a DynamoDB item, and the check that the table is keyed the way the store writes.

The item format is the record format the concepts guide describes; every attribute name is
configurable.
"""

from __future__ import annotations

import logging
import os
import threading
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from idempotent_lambda._record_format import hold_unstorable, release_unstorable
from idempotent_lambda.exceptions import IdempotencyCorruptRecordError, IdempotencyKeySchemaError
from idempotent_lambda.persistence._schema import RecordSchema, stored_status
from idempotent_lambda.persistence.protocol import decode_stored_data
from idempotent_lambda.record import IdempotencyRecord, Status

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

    Item = dict[str, AttributeValueTypeDef]
    ReadItem = Mapping[str, AttributeValueTypeDef]

logger = logging.getLogger(__name__)

_KINDS = {"S": "a string (S)", "N": "an integer (N)"}

#: Fragments of DynamoDB's ValidationException messages that mean a key does not fit the table.
_KEY_SCHEMA_MESSAGES = (
    "missing the key",
    "key element does not match the schema",
    "type mismatch for key",
)


def partition_values(static_pk_value: str | None) -> tuple[str, str]:
    """Return the composite-key partition value: this library's, then Powertools' view's.

    By default ``"idempotency#"`` + the Lambda function's name, read now; without a name this
    library says ``local`` and Powertools, as it reads the variable, nothing.
    """
    if static_pk_value is not None:
        return static_pk_value, static_pk_value
    function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "")
    return f"idempotency#{function_name or 'local'}", f"idempotency#{function_name}"


@dataclass(frozen=True, slots=True)
class ItemSchema(RecordSchema):
    """The table's attribute names, and how records map onto its items.

    With ``sort_key_attr``, ``key_attr`` (the partition key) holds ``static_pk_value`` and the
    sort key holds the idempotency key. ``in_progress_value`` spells IN_PROGRESS in the table
    (Powertools writes ``INPROGRESS``). ``unstorable_attr`` is set in Powertools' layout: an
    unstorable result's marker is then held as `hold_unstorable` says, its reason in that
    attribute.
    """

    key_attr: str
    sort_key_attr: str | None
    static_pk_value: str
    in_progress_value: str = Status.IN_PROGRESS.value
    unstorable_attr: str | None = None

    @property
    def idempotency_key_attr(self) -> str:
        """Return the attribute that holds the idempotency key itself."""
        return self.sort_key_attr or self.key_attr

    def key(self, idempotency_key: str) -> Item:
        """Return the primary key of the item that holds ``idempotency_key``."""
        if self.sort_key_attr is None:
            return {self.key_attr: {"S": idempotency_key}}
        return {
            self.key_attr: {"S": self.static_pk_value},
            self.sort_key_attr: {"S": idempotency_key},
        }

    def owned_by(self, owner: str | None) -> dict[str, Any]:
        """Return the condition arguments fencing a write on ``status = IN_PROGRESS AND owner``."""
        names = {"#status": self.status_attr, "#owner": self.owner_attr}
        values: dict[str, AttributeValueTypeDef] = {":in_progress": {"S": self.in_progress_value}}
        if owner is None:
            condition = "#status = :in_progress AND attribute_not_exists(#owner)"
        else:
            condition = "#status = :in_progress AND #owner = :owner"
            values[":owner"] = {"S": owner}
        return {
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }

    def to_item(self, record: IdempotencyRecord, stored_data: str | bytes | None) -> Item:
        """Return the full item for ``record``; ``stored_data`` is its encoded result, if any."""
        reason = None
        if self.unstorable_attr is not None:
            record, reason = hold_unstorable(record)
            if reason is not None:
                stored_data = None
        item = self.key(record.idempotency_key)
        status = record.status
        item[self.status_attr] = {
            "S": self.in_progress_value if status is Status.IN_PROGRESS else status.value
        }
        if record.expiry_timestamp is not None:
            item[self.expiry_attr] = {"N": str(int(record.expiry_timestamp))}
        if record.in_progress_expiry_timestamp is not None:
            item[self.in_progress_expiry_attr] = {
                "N": str(int(record.in_progress_expiry_timestamp))
            }
        if isinstance(stored_data, str):
            item[self.data_attr] = {"S": stored_data}
        elif stored_data is not None:
            item[self.data_attr] = {"B": stored_data}
        if record.payload_hash is not None:
            item[self.validation_key_attr] = {"S": record.payload_hash}
        if record.owner is not None:
            item[self.owner_attr] = {"S": record.owner}
        if reason is not None and self.unstorable_attr is not None:
            item[self.unstorable_attr] = {"S": reason}
        return item

    def from_item(self, item: ReadItem) -> IdempotencyRecord:
        """Return the record an item holds.

        Raises:
            IdempotencyCorruptRecordError: The item lacks the key or status, has an unknown
                status, an attribute of the wrong type, or data that does not decode. The
                message names the attribute, never its content.
        """
        key = _required_string(item, self.idempotency_key_attr)
        status = stored_status(_required_string(item, self.status_attr), self.in_progress_value)
        if status is None:
            raise IdempotencyCorruptRecordError(
                f"idempotency item has an unknown '{self.status_attr}' value"
            )
        record = self.record(key, status, item, _integer, _string, _data(item, self.data_attr))
        if self.unstorable_attr is None:
            return record
        return release_unstorable(record, _string(item, self.unstorable_attr))


def _required_string(item: ReadItem, name: str) -> str:
    text = _string(item, name)
    if text is None:
        raise IdempotencyCorruptRecordError(f"idempotency item has no '{name}' attribute")
    return text


def _string(item: ReadItem, name: str, kind: str = "S") -> str | None:
    """Return the text of attribute ``name`` (an S, or the digits of an N); None when absent."""
    value = item.get(name)
    if value is None:
        return None
    text = value.get(kind)
    if not isinstance(text, str):
        raise IdempotencyCorruptRecordError(
            f"idempotency item attribute '{name}' is not {_KINDS[kind]}"
        )
    return text


def _integer(item: ReadItem, name: str) -> int | None:
    text = _string(item, name, "N")
    if text is None:
        return None
    try:
        number: Decimal | None = Decimal(text)
    except InvalidOperation:
        number = None
    if number is None or not number.is_finite() or number != number.to_integral_value():
        raise IdempotencyCorruptRecordError(
            f"idempotency item attribute '{name}' is not {_KINDS['N']}"
        )
    return int(number)


def _data(item: ReadItem, name: str) -> str | None:
    value = item.get(name)
    if value is None:
        return None
    stored: str | bytes | None = value.get("S")
    if stored is None:
        binary = value.get("B")
        stored = bytes(binary) if isinstance(binary, (bytes, bytearray)) else None
    if not isinstance(stored, (str, bytes)):
        raise IdempotencyCorruptRecordError(
            f"idempotency item attribute '{name}' is neither S nor B"
        )
    try:
        return decode_stored_data(stored)
    except (zlib.error, UnicodeDecodeError) as exc:
        raise IdempotencyCorruptRecordError(
            f"idempotency item attribute '{name}' holds binary data that does not decompress"
        ) from exc


class KeySchemaCheck:
    """Tell, once per store, a table keyed differently from the attributes the store writes.

    A missing or extra key attribute makes DynamoDB refuse the first request with a
    ``ValidationException``: `explain` then describes the table and names its keys. But
    ``sort_key_attr`` on a table keyed on ``key_attr`` alone is accepted, and every key would
    share one item: so in composite-key mode `before` describes the table on first use.
    ``DescribeTable`` is optional in IAM: when it fails the check is skipped (logged at DEBUG);
    the engine still never replays another key's record (see the reliability guide).

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
        self._checked = schema.sort_key_attr is None  # only composite keys are checked first
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

    def explain(
        self, client: DynamoDBClient, operation: str, error: tuple[str | None, str]
    ) -> None:
        """Raise `IdempotencyKeySchemaError` if DynamoDB's ``error`` (code, message) means a key
        mismatch.

        A ``ValidationException`` has the table described (once): a mismatch found there is
        remembered, so later calls raise without a request. Without a description, DynamoDB's
        own message decides.
        """
        code, said = error
        if code != "ValidationException":
            return
        with self._lock:
            mismatch = self._compare(self._describe(client))
            if mismatch is not None:
                self._mismatch = mismatch
        if mismatch is not None:
            raise IdempotencyKeySchemaError(mismatch)
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
        wanted = {"HASH": (self._schema.key_attr, "S")}
        if self._schema.sort_key_attr is not None:
            wanted["RANGE"] = (self._schema.sort_key_attr, "S")
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
        sort_key = self._schema.sort_key_attr
        sort = "no sort_key_attr" if sort_key is None else f"sort_key_attr={sort_key!r}"
        return f"key_attr={self._schema.key_attr!r} and {sort}"
