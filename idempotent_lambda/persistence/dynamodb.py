"""The production store: one DynamoDB item per idempotency key, written with conditional puts."""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from idempotent_lambda._clock import SYSTEM_CLOCK, Clock
from idempotent_lambda.exceptions import (
    IdempotencyConfigError,
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
    IdempotencyValidationError,
)
from idempotent_lambda.persistence import _dynamodb_batch_read as batch_read
from idempotent_lambda.persistence import _dynamodb_operator as operator
from idempotent_lambda.persistence import _dynamodb_transaction as transact
from idempotent_lambda.persistence import _dynamodb_writes as record_writes
from idempotent_lambda.persistence._aws import DYNAMODB_DEFAULTS, LazyClient, translate_errors
from idempotent_lambda.persistence._dynamodb_item import ItemSchema, partition_values
from idempotent_lambda.persistence._dynamodb_key_schema import KeySchemaCheck
from idempotent_lambda.persistence._dynamodb_operator import DeleteOutcome, ScanPage
from idempotent_lambda.persistence._powertools_layer import BasePersistenceLayer
from idempotent_lambda.persistence._s3_offload import LargeResults, account_of, is_reference
from idempotent_lambda.persistence.datarecord import STATUS_CONSTANTS, DataRecord
from idempotent_lambda.persistence.protocol import (
    DEFAULT_COMPRESSION_THRESHOLD_BYTES,
    POWERTOOLS_IN_PROGRESS,
    ClaimOutcome,
    TransactItem,
)
from idempotent_lambda.record import IdempotencyRecord

if TYPE_CHECKING:
    import boto3
    from botocore.config import Config
    from mypy_boto3_dynamodb.client import DynamoDBClient


class DynamoDBPersistenceLayer:
    """Keep idempotency records in a DynamoDB table, one item per key.

    Every operation is one request: the claim is a conditional ``PutItem`` that also returns the
    blocking (or replaced) item; completion (``PutItem``) and release (``DeleteItem``) are fenced
    on ``status = IN_PROGRESS AND owner = :token``; reads are strongly consistent ``GetItem``.
    The item format is described in `idempotent_lambda.persistence._dynamodb_item`.

    The boto3 client is built lazily on first use, once, thread-safely, with bounded retries and
    timeouts that fit in a Lambda invocation and a pool of 32 connections; ``boto_config`` is
    merged over them; ``AWS_ENDPOINT_URL_DYNAMODB`` is honoured (see `persistence._aws`).

    Transactional completion (`complete_with`, behind
    `idempotent_lambda.transaction.current_transaction`): the business writes and the COMPLETED
    record go in one ``TransactWriteItems`` (IAM: ``dynamodb:TransactWriteItems`` is not an action
    of its own; each write needs its ``PutItem``/``UpdateItem``/``DeleteItem``/
    ``ConditionCheckItem`` on its table). Cancellations for transient reasons only
    (``TransactionConflict``, throttling) are retried twice; nothing is written until it commits.

    Large results: with ``large_result_bucket``, a result whose stored form is larger than
    ``large_result_threshold_bytes`` is written to S3 first, and the record keeps a reference and
    its SHA-256 (format in `idempotent_lambda.persistence._s3_offload`); reading a COMPLETED record
    fetches and verifies it. IAM: ``s3:PutObject`` and ``s3:GetObject`` on the prefix. Without a
    bucket a result too large for an item is an `IdempotencyUnstorableResultError`.

    Errors: every botocore/boto3 failure becomes `IdempotencyPersistenceLayerError` naming the
    operation and error code, with the original as ``__cause__``. So does an item that does not
    follow the record format, never a bare ``KeyError``; messages never contain item contents.
    A table keyed differently from ``key_attr``/``sort_key_attr`` raises
    `IdempotencyKeySchemaError` on first use, saying how the table is keyed. In composite-key
    mode that takes one ``DescribeTable`` on first use (optional in IAM: without it the check is
    skipped, see `persistence._dynamodb_key_schema`).

    Args:
        table_name: The table; its partition key is ``key_attr`` (and sort key ``sort_key_attr``).
        key_attr: Partition key attribute.
        sort_key_attr: Sort key attribute; when set, the partition holds ``static_pk_value`` and
            the sort key holds the idempotency key (for single-table designs).
        static_pk_value: Partition value in composite-key mode; by default
            ``"idempotency#<AWS_LAMBDA_FUNCTION_NAME or 'local'>"``, read when the store is built.
        expiry_attr: Expiration (epoch seconds, N); make it the table's TTL attribute.
        in_progress_expiry_attr: Lease end of an IN_PROGRESS record (epoch milliseconds, N).
        status_attr: Record status attribute.
        data_attr: Stored result (S, or B when zlib-compressed).
        validation_key_attr: Payload validation hash.
        owner_attr: Owner token of the current claim.
        boto_config: botocore ``Config`` merged over the defaults.
        boto3_session: Session to build the client from (default: a new session).
        boto3_client: A ready ``dynamodb`` client, used as-is.
        clock: Time source for the engine.
        compression_threshold_bytes: Results above this many UTF-8 bytes are stored compressed
            (and any result over the item limit; see `persistence.base.encode_stored_data`).
        large_result_bucket: S3 bucket for results too large for an item (None: no offload).
        large_result_prefix: Key prefix of those objects (default ``"idempotency/"``); give the
            bucket a lifecycle rule on it that expires objects after the record expiry.
        large_result_threshold_bytes: Offload above this stored size (default: what an item
            holds, 400,000 bytes); lower it to make replays of big results cheaper.
        s3_client: A ready ``s3`` client for those objects; else built on first use, like the
            ``dynamodb`` one (``AWS_ENDPOINT_URL_S3`` is honoured).
        large_result_bucket_owner: The account id that must own the bucket, sent as
            ``ExpectedBucketOwner`` (S3 refuses a bucket of another account); default: the
            account of ``table_name`` when it is a table ARN.
        large_result_kms_key_id: Encrypt the objects with SSE-KMS under this key (id, ARN or
            alias); default: the bucket's own encryption.

    Shared tables: a function whose config says ``record_format="powertools"`` uses the view
    `with_record_format` returns, which writes items exactly as Powertools does.
    """

    def __init__(
        self,
        table_name: str,
        *,
        key_attr: str = "id",
        sort_key_attr: str | None = None,
        static_pk_value: str | None = None,
        expiry_attr: str = "expiration",
        in_progress_expiry_attr: str = "in_progress_expiration",
        status_attr: str = "status",
        data_attr: str = "data",
        validation_key_attr: str = "validation",
        owner_attr: str = "owner",
        boto_config: Config | None = None,
        boto3_session: boto3.session.Session | None = None,
        boto3_client: DynamoDBClient | None = None,
        clock: Clock = SYSTEM_CLOCK,
        compression_threshold_bytes: int = DEFAULT_COMPRESSION_THRESHOLD_BYTES,
        large_result_bucket: str | None = None,
        large_result_prefix: str | None = None,
        large_result_threshold_bytes: int | None = None,
        s3_client: Any = None,
        large_result_bucket_owner: str | None = None,
        large_result_kms_key_id: str | None = None,
    ) -> None:
        static_pk_value, self._powertools_pk = partition_values(static_pk_value)
        self.table_name = table_name
        self.clock = clock
        self._schema = ItemSchema(
            key_attr=key_attr,
            sort_key_attr=sort_key_attr,
            static_pk_value=static_pk_value,
            expiry_attr=expiry_attr,
            in_progress_expiry_attr=in_progress_expiry_attr,
            status_attr=status_attr,
            data_attr=data_attr,
            validation_key_attr=validation_key_attr,
            owner_attr=owner_attr,
        )
        self._key_schema = KeySchemaCheck(self._schema, table_name)
        self._threshold = compression_threshold_bytes
        self._large = LargeResults(
            bucket=large_result_bucket,
            prefix=large_result_prefix,
            threshold_bytes=large_result_threshold_bytes,
            expected_owner=large_result_bucket_owner or account_of(table_name),
            kms_key_id=large_result_kms_key_id,
            client=s3_client,
            session=boto3_session,
            boto_config=boto_config,
        )
        self._client: LazyClient[DynamoDBClient] = LazyClient(
            "dynamodb",
            client=boto3_client,
            session=boto3_session,
            boto_config=boto_config,
            defaults=DYNAMODB_DEFAULTS,
        )

    @property
    def client(self) -> DynamoDBClient:
        """The ``dynamodb`` client, built on first use.

        Assigning it replaces the client for every later request: Powertools' documented way to
        point a test at DynamoDB Local or a stub (``persistence_layer.client = stub``).
        """
        return self._get_client()

    @client.setter
    def client(self, client: DynamoDBClient) -> None:
        self._client.set(client)

    def with_record_format(self, record_format: str) -> DynamoDBPersistenceLayer:
        """Return this store reading and writing records in ``record_format`` (same table, client).

        ``"powertools"``: items exactly as AWS Lambda Powertools 3.x writes them (status
        ``INPROGRESS``, its default ``static_pk_value`` in composite-key mode, results as plain
        JSON text, never compressed nor offloaded to S3, since Powertools could not read them),
        plus the ``owner`` attribute, which Powertools ignores, so completion and release stay
        fenced. A result too large for an item is then an `IdempotencyUnstorableResultError`.

        Raises:
            IdempotencyConfigError: An unknown format.
        """
        if record_format == "native":
            return self
        if record_format != "powertools":
            raise IdempotencyConfigError(f"unknown record_format {record_format!r}")
        view = copy.copy(self)  # shares the lazily built client
        view._schema = replace(
            self._schema,
            in_progress_value=POWERTOOLS_IN_PROGRESS,
            static_pk_value=self._powertools_pk,
        )
        view._threshold = sys.maxsize
        view._large = LargeResults()  # no offload
        return view

    def claim(
        self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int
    ) -> ClaimOutcome:
        """Write ``record`` (IN_PROGRESS) unless a live record holds its key.

        One conditional ``PutItem``; see `PersistenceStore.claim` for the rule. The blocking
        record comes back with the failed condition, the replaced one with a successful claim.
        """
        return record_writes.claim(
            self._request,
            self._schema,
            self.table_name,
            record,
            self._encode,
            now_ms=now_ms,
            lease_cutoff_ms=lease_cutoff_ms,
            resolve=self._resolve,
            read=self.get,
        )

    def complete(self, record: IdempotencyRecord) -> bool:
        """Replace the caller's IN_PROGRESS record with ``record`` (COMPLETED), if still owned.

        Returns:
            False when the record is no longer IN_PROGRESS under ``record.owner``.

        Raises:
            IdempotencyUnstorableResultError: The result is too large for an item.
        """
        item = self._schema.to_item(record, self._encode(record))
        return record_writes.complete(
            self._request, self._schema, self.table_name, item, record.owner
        )

    def complete_with(self, record: IdempotencyRecord, writes: Sequence[TransactItem]) -> bool:
        """Complete ``record`` and apply ``writes`` in one ``TransactWriteItems``.

        Returns:
            False when the record is no longer IN_PROGRESS under ``record.owner``: the transaction
            was cancelled and nothing was written.

        Raises:
            IdempotencyTransactionConflictError: A business write's condition failed.
            IdempotencyTransactionError: The writes are invalid (too many, one on the record
                itself, rejected by DynamoDB's validation).
            IdempotencyUnstorableResultError: The result is too large for an item (no bucket).
            IdempotencyPersistenceLayerError: The request failed; if it may have committed, the
                record is no longer IN_PROGRESS (releasing it is a no-op).
        """
        key = self._schema.key(record.idempotency_key)
        transact.check_writes(writes, table_name=self.table_name, record_key=key)
        own = {
            "TableName": self.table_name,
            "Item": self._schema.to_item(record, self._encode(record)),
            **record_writes.owned_by(self._schema, record.owner),
        }
        return transact.send(self._request, [*writes, {"Put": own}], writes, with_record=True)

    def write_transaction(self, writes: Sequence[TransactItem]) -> None:
        """Apply ``writes`` in one ``TransactWriteItems``, without a record.

        Raises:
            IdempotencyTransactionConflictError: A write's condition failed.
            IdempotencyTransactionError: The writes are invalid.
        """
        transact.check_writes(writes, table_name=self.table_name, record_key=None)
        transact.send(self._request, list(writes), writes, with_record=False)

    def release(self, idempotency_key: str, owner: str) -> bool:
        """Delete the caller's IN_PROGRESS record, if still owned, so a retry runs again.

        Returns:
            False when the record is no longer IN_PROGRESS under ``owner``.
        """
        return record_writes.release(
            self._request, self._schema, self.table_name, idempotency_key, owner
        )

    def get(
        self, idempotency_key: str, *, fetch_large_result: bool = True
    ) -> IdempotencyRecord | None:
        """Read the record for ``idempotency_key`` (strongly consistent); None when absent.

        ``fetch_large_result=False`` keeps a result offloaded to S3 as its reference (operators).
        """
        with self._request("GetItem") as client:
            response = client.get_item(
                TableName=self.table_name,
                Key=self._schema.key(idempotency_key),
                ConsistentRead=True,
            )
        item = response.get("Item")
        if item is None:
            return None
        record = self._schema.from_item(item)
        return self._resolve(record) if fetch_large_result else record

    def get_many(self, idempotency_keys: Sequence[str]) -> dict[str, IdempotencyRecord]:
        """Read the records of ``idempotency_keys`` with ``BatchGetItem``, strongly consistent.

        One request per 100 keys. Keys DynamoDB leaves unprocessed (throttling, the 16 MB
        response limit) are asked again after a short backoff, a bounded number of times; any
        still unread are left out, as are items that do not follow the record format, so the
        caller's per-key path meets them instead. IAM: ``dynamodb:BatchGetItem``.
        """
        return batch_read.read_many(
            self._request, self.table_name, self._schema, idempotency_keys, self._resolve
        )

    # --- Operator methods (the CLI's), never on an invocation's path. ---

    def scan(
        self, *, prefix: str | None = None, page_size: int | None = None
    ) -> Iterator[ScanPage]:
        """Read the records whose key starts with ``prefix``, page by page, without results.

        A simple-key table is scanned; in composite-key mode only the store's partition is
        queried. Items that are not records are counted per page (``skipped``), not returned.
        """
        return operator.scan(
            self._request, self._schema, self.table_name, prefix=prefix, page_size=page_size
        )

    def delete(self, idempotency_key: str, *, live_cutoff_ms: int | None = None) -> DeleteOutcome:
        """Delete the record of ``idempotency_key``, whatever its owner, so the key runs again.

        Args:
            idempotency_key: The full key.
            live_cutoff_ms: Keep an IN_PROGRESS record whose lease ends at or after this (an
                invocation may still be running it); None deletes it anyway.

        Returns:
            Whether it was deleted, and the deleted record or the one kept (None: no record).
            An offloaded result stays a reference; its S3 object is left to the lifecycle rule.
        """
        outcome = operator.delete(
            self._request, self._schema, self.table_name, idempotency_key, live_cutoff_ms
        )
        if outcome is None:  # the endpoint did not send the kept item back: read it
            return DeleteOutcome(False, self.get(idempotency_key, fetch_large_result=False))
        return outcome

    def release_if_stuck(self, seen: IdempotencyRecord, *, cutoff_ms: int) -> bool:
        """Delete ``seen`` if it is still the same IN_PROGRESS claim, with a lease that ended.

        Fenced on ``seen``'s owner and on its lease ending before ``cutoff_ms`` (without a lease
        end: its expiration), so an owner that claimed the key since ``seen`` was read is never
        touched.

        Returns:
            False when the record changed since it was read, or its lease is live.
        """
        return operator.release_if_stuck(
            self._request, self._schema, self.table_name, seen, cutoff_ms
        )

    def _encode(self, record: IdempotencyRecord) -> str | bytes | None:
        if record.response_data is None:
            return None
        return self._large.encode(
            record.idempotency_key,
            record.owner,
            record.response_data,
            compression_threshold=self._threshold,
        )

    def _resolve(self, record: IdempotencyRecord) -> IdempotencyRecord:
        """Replace an S3 reference in ``record`` by the result it points at."""
        data = record.response_data
        if data is None or not is_reference(data):
            return record
        return replace(record, response_data=self._large.resolve(data))

    @contextmanager
    def _request(self, operation: str) -> Iterator[DynamoDBClient]:
        """Yield the client; translate any botocore error raised inside into our error type.

        A table keyed differently from this store is reported as `IdempotencyKeySchemaError`
        (see `persistence._dynamodb_key_schema`).
        """
        with translate_errors("DynamoDB", operation):
            client = self._client.get()
            if self._key_schema.table_name != self.table_name:  # repointed, as tests do
                self._key_schema = KeySchemaCheck(self._schema, self.table_name)
            self._key_schema.before(client)
            try:
                yield client
            except client.exceptions.ClientError as exc:
                self._key_schema.explain(client, operation, exc.response.get("Error", {}))
                raise

    def _get_client(self) -> DynamoDBClient:
        """Return the client, building it on first use."""
        return self._client.get()


# Powertools' module keeps these names here too; a literal import swap finds them.
__all__ = [
    "STATUS_CONSTANTS",
    "BasePersistenceLayer",
    "DataRecord",
    "DynamoDBPersistenceLayer",
    "IdempotencyItemAlreadyExistsError",
    "IdempotencyItemNotFoundError",
    "IdempotencyValidationError",
]
