"""Results too large for an item, kept in S3: the object first, then the record pointing at it.

The record's ``data`` holds a reference (``{"$s3": {...}}``, see the production guide, "Large
results") to an object of the result's zlib-compressed text, one object per completion. A
reference is followed only into the configured bucket and prefix, no more of the object is read
than the size the reference declares (and one byte to tell a larger one), and its size and
SHA-256 are checked: a tampered record or object is an error, never a wrong result.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from idempotent_lambda._grant import LARGE_RESULTS_ROOT, large_result_prefix
from idempotent_lambda._limits import bounded_inflate
from idempotent_lambda.exceptions import (
    IdempotencyConfigError,
    IdempotencyCorruptRecordError,
    IdempotencyPersistenceLayerError,
)
from idempotent_lambda.persistence._aws import S3_DEFAULTS, LazyClient, translate_errors
from idempotent_lambda.persistence.protocol import MAX_STORED_DATA_BYTES, encode_stored_data

if TYPE_CHECKING:
    import boto3
    from botocore.config import Config

REFERENCE_TAG = "$s3"
_REFERENCE_START = '{"' + REFERENCE_TAG + '"'
DEFAULT_PREFIX = LARGE_RESULTS_ROOT
_MALFORMED = "idempotency item holds a malformed S3 reference"


def is_reference(text: str) -> bool:
    """Tell whether stored text is an S3 reference rather than a result.

    No result's stored text starts like a reference: the codec wraps user keys that start with $.
    """
    return text.startswith(_REFERENCE_START)


class LargeResults:
    """Encode results for the item, offloading those over the threshold to S3; resolve them back.

    ``LargeResults()`` offloads nothing.

    Args:
        bucket: Where large results go; None: no offload (too large stays an error).
        prefix: Key prefix of the objects (the lifecycle rule's filter).
        threshold_bytes: Offload when the result's stored form (compressed when above the
            compression threshold) is larger than this; at most what an item holds.
        client: A ready ``s3`` client; else one is built on first use.
        session: Session to build the client from.
        boto_config: botocore ``Config`` merged over the defaults.
        expected_owner: Account id sent as ``ExpectedBucketOwner``; None sends none.
        kms_key_id: Put objects with SSE-KMS under this key; None: the bucket's default.

    Raises:
        IdempotencyConfigError: A threshold or prefix without a bucket, or out of range.
    """

    def __init__(
        self,
        *,
        bucket: str | None = None,
        prefix: str | None = None,
        threshold_bytes: int | None = None,
        client: Any = None,
        session: boto3.session.Session | None = None,
        boto_config: Config | None = None,
        expected_owner: str | None = None,
        kms_key_id: str | None = None,
    ) -> None:
        if bucket is None and (prefix is not None or threshold_bytes is not None):
            raise IdempotencyConfigError(
                "large_result_prefix and large_result_threshold_bytes need large_result_bucket"
            )
        if bucket is not None and (not isinstance(bucket, str) or not bucket):
            raise IdempotencyConfigError("large_result_bucket must be a bucket name")
        if prefix is not None and not isinstance(prefix, str):
            raise IdempotencyConfigError("large_result_prefix must be a string")
        threshold = MAX_STORED_DATA_BYTES if threshold_bytes is None else threshold_bytes
        if isinstance(threshold, bool) or not isinstance(threshold, int):
            raise IdempotencyConfigError("large_result_threshold_bytes must be an integer")
        if not 0 <= threshold <= MAX_STORED_DATA_BYTES:
            raise IdempotencyConfigError(
                f"large_result_threshold_bytes must be between 0 and {MAX_STORED_DATA_BYTES}"
            )
        for name, value in (("bucket owner", expected_owner), ("KMS key id", kms_key_id)):
            if value is not None and (not isinstance(value, str) or not value):
                raise IdempotencyConfigError(f"the large result {name} must be a non-empty string")
        self.bucket = bucket
        self.expected_owner = expected_owner
        self.kms_key_id = kms_key_id
        self.prefix = DEFAULT_PREFIX if prefix is None else prefix
        self._per_key_prefix = prefix is None
        self.threshold_bytes = threshold
        self._client: LazyClient[Any] = LazyClient(
            "s3", client=client, session=session, boto_config=boto_config, defaults=S3_DEFAULTS
        )

    def encode(
        self, idempotency_key: str, owner: str | None, data: str, *, compression_threshold: int
    ) -> str | bytes:
        """Return what the item's ``data`` holds: text, zlib bytes, or a reference to S3.

        Raises:
            IdempotencyUnstorableResultError: Too large for an item and no bucket.
            IdempotencyPersistenceLayerError: Writing the object failed.
        """
        if self.bucket is None:
            return encode_stored_data(data, compression_threshold=compression_threshold)
        raw = data.encode("utf-8", "surrogatepass")
        packed: bytes | None = None
        if len(raw) <= compression_threshold:
            if len(raw) <= self.threshold_bytes:
                return data
        else:
            packed = zlib.compress(raw, 6)
            if len(packed) <= self.threshold_bytes:
                return packed
        return self._put(self.bucket, idempotency_key, owner, packed or zlib.compress(raw, 6))

    def resolve(self, text: str) -> str:
        """Return the result text a reference points at, fetched and verified.

        Raises:
            IdempotencyPersistenceLayerError: The reference is malformed; the object is
                missing, unreadable, of the wrong size or checksum, or does not decompress.
        """
        bucket, key, sha256, size = parse_reference(text)
        if bucket != self.bucket or not key.startswith(self.prefix):
            raise IdempotencyPersistenceLayerError(
                "a stored result points outside the configured large_result_bucket and prefix; "
                "it was not followed"
            )
        with translate_errors("S3", "GetObject"):
            # One byte past the declared size tells a larger object: no more is sent or read.
            response = self._client.get().get_object(
                Bucket=bucket, Key=key, Range=f"bytes=0-{size}", **self._owner()
            )
            body = read_at_most(response["Body"], size + 1)
        if len(body) != size or hashlib.sha256(body).hexdigest() != sha256:
            raise IdempotencyPersistenceLayerError(
                f"large result object s3://{bucket}/{key} does not match its record's checksum"
            )
        try:
            return bounded_inflate(body).decode("utf-8", "surrogatepass")
        except (zlib.error, UnicodeDecodeError) as exc:
            raise IdempotencyPersistenceLayerError(
                f"large result object s3://{bucket}/{key} does not decompress"
            ) from exc

    def _put(self, bucket: str, idempotency_key: str, owner: str | None, body: bytes) -> str:
        # One object per completion: an invocation that lost its lease never overwrites another's.
        # By default under `idempotency/<key prefix>/`, the folder the CDK construct grants.
        folder = (
            large_result_prefix(idempotency_key.rpartition("#")[0] or "unprefixed")
            if self._per_key_prefix
            else self.prefix
        )
        key = f"{folder}{quote(idempotency_key, safe='.-_~')}/{owner or 'unowned'}"
        digest = hashlib.sha256(body)
        with translate_errors("S3", "PutObject"):
            self._client.get().put_object(
                Bucket=bucket,
                Key=key,
                Body=body,
                ContentType="application/octet-stream",
                ChecksumSHA256=base64.b64encode(digest.digest()).decode("ascii"),
                **self._owner(),
                **self._encryption(),
            )
        reference = {
            "bucket": bucket,
            "key": key,
            "sha256": digest.hexdigest(),
            "size": len(body),
            "encoding": "zlib",
        }
        return json.dumps({REFERENCE_TAG: reference}, separators=(",", ":"))

    def _owner(self) -> dict[str, str]:
        return {} if self.expected_owner is None else {"ExpectedBucketOwner": self.expected_owner}

    def _encryption(self) -> dict[str, str]:
        if self.kms_key_id is None:
            return {}
        return {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": self.kms_key_id}


def read_at_most(stream: Any, limit: int) -> bytes:
    """Return the first ``limit`` bytes of ``stream`` (fewer if it ends first), then close it."""
    data = bytearray()
    try:
        while len(data) < limit:
            chunk = stream.read(limit - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        stream.close()
    return bytes(data)


def account_of(table_name: str) -> str | None:
    """Return the account id of a table ARN (``arn:aws:dynamodb:<region>:<account>:table/...``);
    None for a plain table name."""
    parts = table_name.split(":", 5) if isinstance(table_name, str) else []
    if len(parts) == 6 and parts[0] == "arn" and parts[2] == "dynamodb" and parts[4].isdigit():
        return parts[4]
    return None


def parse_reference(text: str) -> tuple[str, str, str, int]:
    """Return the ``(bucket, key, sha256, size)`` of a reference's object.

    Raises:
        IdempotencyCorruptRecordError: ``text`` is not a well-formed reference.
    """
    try:
        reference = json.loads(text)[REFERENCE_TAG]
        bucket, key, sha256, size = (reference[n] for n in ("bucket", "key", "sha256", "size"))
        encoding = reference.get("encoding", "zlib")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise IdempotencyCorruptRecordError(_MALFORMED) from exc
    valid = all(isinstance(v, str) and v for v in (bucket, key, sha256)) and encoding == "zlib"
    if not valid or isinstance(size, bool) or not isinstance(size, int):
        raise IdempotencyCorruptRecordError(_MALFORMED)
    return bucket, key, sha256, size
