"""Writes of a batch that carry no condition: many completions, or many claims deleted, in one
``BatchWriteItem`` (`BatchCompleteStore`).

A batch sends them only while each record's lease outlasts the longest the request can take
(`unconditional_write_ms`), so that no other invocation can have taken a key over meanwhile
(`idempotent_lambda.adapters._batch_completions`). A store that builds its own clients sends them
through a sibling client of one attempt, whose bound is its connect and read timeouts; a client
passed in is used as it is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from idempotent_lambda._clock import Clock
from idempotent_lambda.exceptions import IdempotencyConfigError
from idempotent_lambda.persistence._aws import LazyClient
from idempotent_lambda.record import IdempotencyRecord

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

    from idempotent_lambda.persistence.dynamodb._schema import ItemSchema

#: ``BatchWriteItem`` takes at most 25 puts or deletes per request.
BATCH_WRITE_LIMIT = 25


class GroupedWriteMethods:
    """The grouped writes of `DynamoDBPersistenceLayer`, which supplies the table and clients."""

    if TYPE_CHECKING:
        table_name: str
        clock: Clock
        _schema: ItemSchema
        _client: LazyClient[DynamoDBClient]
        _grouped: LazyClient[DynamoDBClient]

        def _request(
            self, operation: str, *, grouped: bool = False
        ) -> AbstractContextManager[DynamoDBClient]: ...

        def _encode(self, record: IdempotencyRecord) -> str | bytes | None: ...

    def put_completed(
        self, records: Sequence[IdempotencyRecord], *, send_by_ms: int | None = None
    ) -> list[IdempotencyRecord]:
        """See `BatchCompleteStore.put_completed`: one ``BatchWriteItem``, no condition."""
        by_key = {record.idempotency_key: record for record in records}
        if len(by_key) != len(records) or len(records) > BATCH_WRITE_LIMIT:
            raise IdempotencyConfigError("put_completed takes at most 25 records of distinct keys")
        puts = [{"PutRequest": {"Item": self._schema.to_item(r, self._encode(r))}} for r in records]
        if send_by_ms is not None and self.clock.now_ms() >= send_by_ms:
            return list(records)  # the encoding (an S3 offload) took the time the lease allowed
        left = self._write_batch(puts)
        name = self._schema.idempotency_key_attr
        return [by_key[put["PutRequest"]["Item"][name]["S"]] for put in left]

    def delete_claims(
        self, idempotency_keys: Sequence[str], *, send_by_ms: int | None = None
    ) -> list[str]:
        """See `BatchCompleteStore.delete_claims`: one ``BatchWriteItem``, no condition."""
        if (
            len(set(idempotency_keys)) != len(idempotency_keys)
            or len(idempotency_keys) > BATCH_WRITE_LIMIT
        ):
            raise IdempotencyConfigError("delete_claims takes at most 25 distinct keys")
        if send_by_ms is not None and self.clock.now_ms() >= send_by_ms:
            return list(idempotency_keys)
        deletes = [{"DeleteRequest": {"Key": self._schema.key(key)}} for key in idempotency_keys]
        left = self._write_batch(deletes)
        by_item = {_key_text(self._schema.key(key)): key for key in idempotency_keys}
        return [by_item[_key_text(delete["DeleteRequest"]["Key"])] for delete in left]

    def _write_batch(self, requests: list[Any]) -> list[Any]:
        """Send ``requests`` in one ``BatchWriteItem``; return those DynamoDB left unprocessed."""
        with self._request("BatchWriteItem", grouped=True) as client:
            response = client.batch_write_item(RequestItems={self.table_name: requests})
        left: Any = response.get("UnprocessedItems") or {}
        return [request for requests in left.values() for request in requests]

    def _grouped_client(self) -> DynamoDBClient:
        """The client of unconditional grouped writes: a one-attempt sibling of the store's own
        client; the client itself when it was passed in or set (never one behind the user's)."""
        client = self._client.get()
        return self._grouped.get() if self._client.own else client


def _key_text(key: Mapping[str, Any]) -> str:
    """The key of an item as one string, whatever the order of its attributes."""
    return json.dumps(key, sort_keys=True)
