"""Convert between `IdempotencyRecord` and DynamoDB items, in one place.

The stored format is a contract (see the design's section 6): the key (or a static partition
value plus the key as sort key), ``status`` (S), ``expiration`` (N, epoch seconds),
``in_progress_expiration`` (N, epoch milliseconds), ``data`` (S, or B when zlib-compressed),
``validation`` (S) and ``owner`` (S). Every attribute name is configurable.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING

from idempotent_lambda.exceptions import IdempotencyPersistenceLayerError
from idempotent_lambda.persistence._schema import RecordSchema, stored_status
from idempotent_lambda.persistence.protocol import decode_stored_data
from idempotent_lambda.record import IdempotencyRecord, Status

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

    Item = dict[str, AttributeValueTypeDef]
    ReadItem = Mapping[str, AttributeValueTypeDef]


def partition_values(static_pk_value: str | None) -> tuple[str, str]:
    """Return the composite-key partition value: this library's, then Powertools' view's.

    Given, both are ``static_pk_value``. By default both are ``"idempotency#"`` + the Lambda
    function's name, read now; without one this library says ``local`` and Powertools, as it
    reads the variable, nothing.
    """
    if static_pk_value is not None:
        return static_pk_value, static_pk_value
    function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "")
    return f"idempotency#{function_name or 'local'}", f"idempotency#{function_name}"


class CorruptItemError(IdempotencyPersistenceLayerError):
    """A stored item does not follow the record format; raised instead of KeyError/ValueError."""


@dataclass(frozen=True, slots=True)
class ItemSchema(RecordSchema):
    """Attribute names of the table, and how records map onto them.

    When ``sort_key_attr`` is set, ``key_attr`` (the partition key) holds ``static_pk_value`` and
    the sort key holds the idempotency key; otherwise ``key_attr`` holds the idempotency key.
    ``in_progress_value`` is how IN_PROGRESS is spelled in the table (Powertools writes
    ``INPROGRESS``).
    """

    key_attr: str
    sort_key_attr: str | None
    static_pk_value: str
    in_progress_value: str = Status.IN_PROGRESS.value

    def status_value(self, status: Status) -> str:
        """Return how ``status`` is stored."""
        return self.in_progress_value if status is Status.IN_PROGRESS else status.value

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

    def to_item(self, record: IdempotencyRecord, stored_data: str | bytes | None) -> Item:
        """Return the full item for ``record``; ``stored_data`` is its encoded result, if any."""
        item = self.key(record.idempotency_key)
        item[self.status_attr] = {"S": self.status_value(record.status)}
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
        return item

    def from_item(self, item: ReadItem) -> IdempotencyRecord:
        """Return the record an item holds.

        Raises:
            CorruptItemError: The item lacks the key or status, has an unknown status, an
                attribute of the wrong type, or data that does not decode. The message names the
                attribute, never its content.
        """
        key = _required_string(item, self.idempotency_key_attr)
        status = stored_status(_required_string(item, self.status_attr), self.in_progress_value)
        if status is None:
            raise CorruptItemError(f"idempotency item has an unknown '{self.status_attr}' value")
        return self.record(key, status, item, _integer, _string, _data(item, self.data_attr))


def _required_string(item: ReadItem, name: str) -> str:
    text = _string(item, name)
    if text is None:
        raise CorruptItemError(f"idempotency item has no '{name}' attribute")
    return text


def _string(item: ReadItem, name: str) -> str | None:
    value = item.get(name)
    if value is None:
        return None
    text = value.get("S")
    if not isinstance(text, str):
        raise CorruptItemError(f"idempotency item attribute '{name}' is not a string (S)")
    return text


def _integer(item: ReadItem, name: str) -> int | None:
    value = item.get(name)
    if value is None:
        return None
    text = value.get("N")
    try:
        number = Decimal(text) if isinstance(text, str) else None
    except InvalidOperation:
        number = None
    if number is None or not number.is_finite() or number != number.to_integral_value():
        raise CorruptItemError(f"idempotency item attribute '{name}' is not an integer (N)")
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
        raise CorruptItemError(f"idempotency item attribute '{name}' is neither S nor B")
    try:
        return decode_stored_data(stored)
    except (zlib.error, UnicodeDecodeError) as exc:
        raise CorruptItemError(
            f"idempotency item attribute '{name}' holds binary data that does not decompress"
        ) from exc
