"""The production store: one DynamoDB item per idempotency key, written with conditional puts.

It is longer than the package's other modules because each of the store's operations (claim,
complete, release, get, get_many, and the unconditional grouped writes' entry points) is written
inline, one round trip each, so a reader sees every request a call makes in one place; item
layout, transactions, S3 offloads, grouped writes and operator methods live beside it.
"""

from __future__ import annotations

import copy
import functools
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from idempotent_lambda._clock import SYSTEM_CLOCK, Clock
from idempotent_lambda._record_format import POWERTOOLS_UNSTORABLE_ATTR
from idempotent_lambda.exceptions import (
    IdempotencyClaimAccessDeniedError,
    IdempotencyConfigError,
    IdempotencyCorruptRecordError,
    IdempotencyPersistenceLayerError,
    IdempotencyTransactionError,
    IdempotencyUnstorableResultError,
)
from idempotent_lambda.persistence._aws import (
    DYNAMODB_DEFAULTS,
    GROUPED_WRITES,
    LazyClient,
    count_requests,
    error_details,
    request_bound_ms,
    translate_errors,
)
from idempotent_lambda.persistence.dynamodb import _transaction
from idempotent_lambda.persistence.dynamodb._grouped import GroupedWriteMethods
from idempotent_lambda.persistence.dynamodb._operator import OperatorMethods
from idempotent_lambda.persistence.dynamodb._outbox import OutboxMethods
from idempotent_lambda.persistence.dynamodb._s3 import LargeResults, account_of, is_reference
from idempotent_lambda.persistence.dynamodb._schema import (
    ItemSchema,
    KeySchemaCheck,
    partition_values,
)
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
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

    from idempotent_lambda.persistence.dynamodb._schema import ReadItem

#: Claim condition; must agree with `idempotent_lambda.persistence.protocol.claim_allowed`.
CLAIM_CONDITION = (
    "attribute_not_exists(#key) OR #expiry < :now_s"
    " OR (#status = :in_progress AND #lease < :cutoff_ms)"
)
#: Conditional puts of one claim: a second only when the record that failed the first is gone.
CLAIM_ATTEMPTS = 2
#: ``BatchGetItem`` takes at most 100 keys per request.
BATCH_GET_LIMIT = 100
#: Requests for one chunk (the first and the retries of unprocessed keys), and the first backoff.
BATCH_GET_ATTEMPTS, BATCH_GET_BACKOFF_S = 4, 0.05


class DynamoDBPersistenceLayer(OperatorMethods, OutboxMethods, GroupedWriteMethods):
    """Keep idempotency records in a DynamoDB table, one item per key.

    Each operation is one request. The guides describe the rest: the item format, the client,
    errors and IAM (Getting started, "The DynamoDB store"), transactions and large results
    (Running in production).

    Args:
        table_name: The table (a name or an ARN).
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
        boto_config: botocore ``Config`` merged over the defaults (3 attempts, 2 s connect and
            3 s read timeouts, 128 connections); ``AWS_ENDPOINT_URL_DYNAMODB`` is honoured. A
            batch's grouped writes go through a client built the same way with one attempt.
        boto3_session: Session to build the clients from (default: a new session).
        boto3_client: A ready ``dynamodb`` client, used as-is, grouped writes included (its
            timeouts and retries decide whether a batch may group them); else one is built on
            first use.
        clock: Time source for the engine.
        compression_threshold_bytes: Results above this many UTF-8 bytes are stored compressed.
        large_result_bucket: S3 bucket for results too large for an item (None: no offload).
        large_result_prefix: Key prefix of those objects (default ``"idempotency/"``).
        large_result_threshold_bytes: Offload above this stored size (default 400,000 bytes).
        s3_client: A ready ``s3`` client for those objects; else one is built on first use.
        large_result_bucket_owner: Account id sent as ``ExpectedBucketOwner`` (default: the
            account of ``table_name`` when it is an ARN).
        large_result_kms_key_id: Encrypt the objects with SSE-KMS under this key.
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
        self._table_name = [table_name]  # one cell, shared with the format views
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
        self._references = True  # results offloaded to S3 are resolved
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
        self._counted: object = None  # the client whose requests are counted
        dynamodb = functools.partial(
            LazyClient,
            "dynamodb",
            session=boto3_session,
            boto_config=boto_config,
            defaults=DYNAMODB_DEFAULTS,
        )
        self._client: LazyClient[DynamoDBClient] = dynamodb(client=boto3_client)
        self._grouped: LazyClient[DynamoDBClient] = dynamodb(client=None, overrides=GROUPED_WRITES)

    @property
    def table_name(self) -> str:
        """The table; assigning one (as Powertools' testing pattern does) repoints the views too."""
        return self._table_name[0]

    @table_name.setter
    def table_name(self, table_name: str) -> None:
        self._table_name[0] = table_name

    @property
    def client(self) -> DynamoDBClient:
        """The ``dynamodb`` client, built on first use; assigning one (a stub) replaces it."""
        return self._get_client()

    @client.setter
    def client(self, client: DynamoDBClient) -> None:
        self._client.set(client)

    def with_record_format(self, record_format: str) -> DynamoDBPersistenceLayer:
        """Return this store reading and writing records in ``record_format`` (same table, client).

        ``"powertools"`` writes items exactly as Powertools 3.x does, plus attributes it
        ignores (see the [shared-tables guide](../shared-tables.md)); results are never
        compressed nor offloaded.

        Raises:
            IdempotencyConfigError: An unknown format, or ``"powertools"`` on a store with a
                ``large_result_bucket`` (Powertools cannot read an offloaded result).
        """
        if record_format == "native":
            return self
        if record_format != "powertools":
            raise IdempotencyConfigError(f"unknown record_format {record_format!r}")
        if self._large.bucket is not None:
            raise IdempotencyConfigError(
                "large_result_bucket offloads results in the native format only (Powertools "
                'cannot read them): pass IdempotencyConfig(record_format="native"), on a table '
                "no Powertools code reads"
            )
        view = copy.copy(self)  # shares the lazily built client
        view._schema = replace(
            self._schema,
            in_progress_value=POWERTOOLS_IN_PROGRESS,
            static_pk_value=self._powertools_pk,
            unstorable_attr=POWERTOOLS_UNSTORABLE_ATTR,
        )
        view._threshold = sys.maxsize
        view._large = LargeResults()  # no offload
        view._references = False  # a result is the user's data, even one that reads like {"$s3"
        return view

    def claim(
        self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int
    ) -> ClaimOutcome:
        """See `PersistenceStore.claim`: one conditional ``PutItem``.

        DynamoDB sends back the blocking record with the failed condition, and the replaced one
        with a successful claim. An endpoint that sends no blocking record (dynalite) costs one
        ``GetItem`` more; should that find the key free, the claim is written once more.
        """
        schema = self._schema
        for _attempt in range(CLAIM_ATTEMPTS):
            with self._request("PutItem") as client:
                try:
                    response = client.put_item(
                        TableName=self.table_name,
                        Item=schema.to_item(record, self._encode(record)),
                        ConditionExpression=CLAIM_CONDITION,
                        ExpressionAttributeNames={
                            "#key": schema.idempotency_key_attr,
                            "#expiry": schema.expiry_attr,
                            "#status": schema.status_attr,
                            "#lease": schema.in_progress_expiry_attr,
                        },
                        ExpressionAttributeValues={
                            ":now_s": {"N": str(now_ms // 1000)},
                            ":in_progress": {"S": schema.in_progress_value},
                            ":cutoff_ms": {"N": str(lease_cutoff_ms)},
                        },
                        ReturnValues="ALL_OLD",
                        ReturnValuesOnConditionCheckFailure="ALL_OLD",
                    )
                except client.exceptions.ConditionalCheckFailedException as exc:
                    blocking = cast("Mapping[str, Any]", exc.response).get("Item")
                    failure = exc
                except client.exceptions.ClientError as exc:
                    if error_details(exc)[0] == "AccessDeniedException":
                        raise IdempotencyClaimAccessDeniedError(
                            record.idempotency_key.rpartition("#")[0], self.table_name
                        ) from exc
                    raise
                else:
                    return self._claimed(response.get("Attributes"))
            if blocking is not None:
                return ClaimOutcome(False, self._resolve(schema.from_item(blocking)))
            previous = self.get(record.idempotency_key)
            if previous is not None:
                return ClaimOutcome(False, previous)
            # Released or deleted since the condition failed: the key is free now.
        raise IdempotencyPersistenceLayerError(
            "DynamoDB PutItem failed: ConditionalCheckFailedException, and no blocking record"
        ) from failure

    def complete(self, record: IdempotencyRecord) -> bool:
        """See `PersistenceStore.complete`: one ``PutItem`` fenced on the owner token."""
        item = self._schema.to_item(record, self._encode(record))
        with self._request("PutItem") as client:
            try:
                client.put_item(
                    TableName=self.table_name, Item=item, **self._schema.owned_by(record.owner)
                )
            except client.exceptions.ConditionalCheckFailedException:
                return False
            except client.exceptions.ClientError as exc:
                code, message = error_details(exc)
                if code == "ValidationException" and "size" in message.lower():
                    raise IdempotencyUnstorableResultError(
                        "the result does not fit in a DynamoDB item (400 KB limit)"
                    ) from exc
                raise
        return True

    def release(self, idempotency_key: str, owner: str) -> bool:
        """See `PersistenceStore.release`: one ``DeleteItem`` fenced on the owner token."""
        with self._request("DeleteItem") as client:
            try:
                client.delete_item(
                    TableName=self.table_name,
                    Key=self._schema.key(idempotency_key),
                    **self._schema.owned_by(owner),
                )
            except client.exceptions.ConditionalCheckFailedException:
                return False
        return True

    def get(
        self, idempotency_key: str, *, fetch_large_result: bool = True
    ) -> IdempotencyRecord | None:
        """See `PersistenceStore.get`: one strongly consistent ``GetItem``.

        ``fetch_large_result=False`` keeps a result offloaded to S3 as its reference (operators).
        """
        item = self._get_item(idempotency_key)
        if item is None:
            return None
        record = self._schema.from_item(item)
        return self._resolve(record) if fetch_large_result else record

    def _get_item(self, idempotency_key: str) -> ReadItem | None:
        """The item of ``idempotency_key`` as stored, read with one consistent ``GetItem``."""
        with self._request("GetItem") as client:
            response = client.get_item(
                TableName=self.table_name,
                Key=self._schema.key(idempotency_key),
                ConsistentRead=True,
            )
        return response.get("Item")

    def get_many(self, idempotency_keys: Sequence[str]) -> dict[str, IdempotencyRecord]:
        """See `BatchReadStore.get_many`: a strongly consistent ``BatchGetItem`` per 100 keys.

        Keys DynamoDB leaves unprocessed are asked again after a backoff, a few times; keys
        still unread, and items that are not records, are left out.
        """
        unique = list(dict.fromkeys(idempotency_keys))
        found: dict[str, IdempotencyRecord] = {}
        for start in range(0, len(unique), BATCH_GET_LIMIT):
            keys = [self._schema.key(key) for key in unique[start : start + BATCH_GET_LIMIT]]
            pending: Any = {self.table_name: {"Keys": keys, "ConsistentRead": True}}
            items: list[Mapping[str, Any]] = []
            for attempt in range(BATCH_GET_ATTEMPTS):
                if attempt:
                    time.sleep(min(BATCH_GET_BACKOFF_S * 2 ** (attempt - 1), 0.5))
                with self._request("BatchGetItem") as client:
                    response = client.batch_get_item(RequestItems=pending)
                items.extend(response.get("Responses", {}).get(self.table_name, ()))
                pending = response.get("UnprocessedKeys") or {}
                if not pending.get(self.table_name, {}).get("Keys"):
                    break
            for item in items:
                try:
                    record = self._resolve(self._schema.from_item(item))
                except IdempotencyCorruptRecordError:
                    continue
                found[record.idempotency_key] = record
        return found

    def unconditional_write_ms(self) -> int | None:
        """See `BatchCompleteStore.unconditional_write_ms`: what botocore does for the client.

        Every attempt botocore may make, each its connect and read timeouts, plus the longest
        backoffs between them (`request_bound_ms`): 5 s when the store builds its clients, since
        its grouped writes then go through a client of one attempt; a client passed in (or set)
        is used as it is, 28 s for one built like the store's.
        None for a client in adaptive retry mode, and on a subclass that overrides `complete`
        but not `put_completed` (or `release` but not `delete_claims`): its writes may differ.
        """
        cls = type(self)
        base = DynamoDBPersistenceLayer
        if (cls.complete is not base.complete and cls.put_completed is base.put_completed) or (
            cls.release is not base.release and cls.delete_claims is base.delete_claims
        ):
            return None
        return request_bound_ms(self._grouped_client())  # the client may be replaced at any time

    def complete_with(self, record: IdempotencyRecord, writes: Sequence[TransactItem]) -> bool:
        """See `TransactionalStore.complete_with`: one ``TransactWriteItems``.

        Cancellations for transient reasons only (conflicts, throttling) are sent again, twice
        at most; nothing is written until it commits.

        Raises:
            IdempotencyPersistenceLayerError: The request failed; if it may have committed, the
                record is no longer IN_PROGRESS (releasing it is a no-op).
        """
        key = self._schema.key(record.idempotency_key)
        _transaction.check_writes(writes, table_name=self.table_name, record_key=key)
        own = {
            "TableName": self.table_name,
            "Item": self._schema.to_item(record, self._encode(record)),
            **self._schema.owned_by(record.owner),
        }
        return self._transact([*writes, {"Put": own}], writes, with_record=True)

    def write_transaction(self, writes: Sequence[TransactItem]) -> None:
        """See `TransactionalStore.write_transaction`: one ``TransactWriteItems``."""
        _transaction.check_writes(writes, table_name=self.table_name, record_key=None)
        self._transact(list(writes), writes, with_record=False)

    def _transact(
        self, items: list[TransactItem], writes: Sequence[TransactItem], *, with_record: bool
    ) -> bool:
        """Send ``items`` (``writes``, then the record's ``Put`` when ``with_record``).

        Returns:
            False when the record's condition failed (nothing was written).
        """
        for attempt in range(_transaction.ATTEMPTS):
            with self._request("TransactWriteItems") as client:
                try:
                    sent = cast("list[TransactWriteItemTypeDef]", items)
                    client.transact_write_items(TransactItems=sent)
                    return True
                except client.exceptions.TransactionCanceledException as exc:
                    response = cast("Mapping[str, Any]", exc.response)
                    cancelled = _transaction.read_cancellation(
                        response, writes, with_record=with_record
                    )
                    error = exc
                except client.exceptions.ClientError as exc:
                    if error_details(exc)[0] != "ValidationException":
                        raise
                    raise IdempotencyTransactionError(
                        "DynamoDB rejected the transaction (ValidationException; see the cause), "
                        "nothing was written"
                    ) from exc
            if cancelled.lease_lost:
                return False
            failure = cancelled.failure(last_attempt=attempt + 1 == _transaction.ATTEMPTS)
            if failure is not None:
                raise failure from error
            time.sleep(_transaction.BACKOFF_S[attempt])
        raise AssertionError("unreachable")  # pragma: no cover

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
        if data is None or not self._references or not is_reference(data):
            return record
        return replace(record, response_data=self._large.resolve(data))

    def _claimed(self, replaced: Mapping[str, Any] | None) -> ClaimOutcome:
        """Return the outcome of a written claim that replaced the item ``replaced``."""
        try:
            return ClaimOutcome(True, self._schema.from_item(replaced) if replaced else None)
        except IdempotencyCorruptRecordError:
            # The claim is written: an old item that expired while corrupt must not fail it, or
            # the key would stay blocked until the new lease ended. The engine only uses the
            # replaced record to tell a takeover from a fresh claim.
            return ClaimOutcome(True, None)

    @contextmanager
    def _request(self, operation: str, *, grouped: bool = False) -> Iterator[DynamoDBClient]:
        """Yield the client, and translate any botocore error raised inside (`translate_errors`).

        A table keyed differently from this store is reported as `IdempotencyKeySchemaError`.
        """
        with translate_errors("DynamoDB", operation):
            client = self._grouped_client() if grouped else self._client.get()
            if client is not self._counted:
                count_requests(client)
                self._counted = client
            if self._key_schema.table_name != self.table_name:  # repointed, as tests do
                self._key_schema = KeySchemaCheck(self._schema, self.table_name)
            self._key_schema.before(client)
            try:
                yield client
            except client.exceptions.ClientError as exc:
                self._key_schema.explain(client, operation, error_details(exc))
                raise

    def _get_client(self) -> DynamoDBClient:
        """Return the client, building it on first use."""
        return self._client.get()
