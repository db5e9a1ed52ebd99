"""Resource caps: bounded gzip/zlib decompression, and the S3 bucket owner of offloaded results."""

from __future__ import annotations

import base64
import gzip
import io
import json
import zlib
from typing import Any

import pytest
from botocore.exceptions import ClientError

from idempotent_lambda import (
    IdempotencyConfig,
    IdempotencyPersistenceLayerError,
    InMemoryPersistenceLayer,
    idempotent,
)
from idempotent_lambda._limits import (
    DEFAULT_MAX_STORED_RESULT_BYTES,
    INFLATE_CHUNK_BYTES,
    DecompressionLimitError,
    bounded_gunzip,
    bounded_inflate,
    stored_result_limit,
)
from idempotent_lambda.exceptions import IdempotencyConfigError, IdempotencyKeyError
from idempotent_lambda.persistence.base import decode_stored_data
from idempotent_lambda.persistence.dynamodb._s3 import LargeResults, account_of

BOMB = b"\0" * 30_000_000  # 30 MB of zeros: about 30 KB compressed


def test_gunzip_and_inflate_return_what_fits() -> None:
    """Up to the limit, both decompress exactly; several gzip members are joined."""
    assert b"abc" * 10 == bounded_gunzip(gzip.compress(b"abc" * 10), 30)
    assert b"ab" == bounded_gunzip(gzip.compress(b"a") + gzip.compress(b"b"), 2)
    assert b"abc" * 10 == bounded_inflate(zlib.compress(b"abc" * 10), 30)


@pytest.mark.parametrize("unpack", [bounded_gunzip, bounded_inflate])
def test_a_bomb_stops_at_the_limit(unpack: Any) -> None:
    """Past the limit: the typed error (a zlib.error), long before the whole output exists."""
    packed = gzip.compress(BOMB) if unpack is bounded_gunzip else zlib.compress(BOMB)
    with pytest.raises(DecompressionLimitError, match="more than 1000 bytes"):
        unpack(packed, 1000)
    assert issubclass(DecompressionLimitError, zlib.error)


@pytest.mark.parametrize("unpack", [bounded_gunzip, bounded_inflate])
def test_truncated_or_trailing_data_is_an_error(unpack: Any) -> None:
    """A cut stream is corrupt, as before."""
    packed = gzip.compress(b"hello") if unpack is bounded_gunzip else zlib.compress(b"hello")
    with pytest.raises(zlib.error):
        unpack(packed[:-3], 100)


def test_powertools_base64_gzip_is_bounded_by_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The built-in refuses a payload inflating past ``IDEMPOTENCY_MAX_GZIP_BYTES``."""
    event = {"data": base64.b64encode(gzip.compress(b'{"id": 1}' + b" " * 5000)).decode()}
    config = IdempotencyConfig(
        event_key_jmespath="powertools_json(powertools_base64_gzip(data)).id"
    )

    @idempotent(persistence_store=InMemoryPersistenceLayer(), config=config)
    def handler(event: dict[str, Any], context: Any) -> str:
        return "ran"

    assert "ran" == handler(event, None)
    monkeypatch.setenv("IDEMPOTENCY_MAX_GZIP_BYTES", "1000")
    with pytest.raises(IdempotencyKeyError, match="DecompressionLimitError"):
        handler(event, None)
    monkeypatch.setenv("IDEMPOTENCY_MAX_GZIP_BYTES", "lots")
    with pytest.raises((IdempotencyKeyError, IdempotencyConfigError)):
        handler(event, None)


def test_stored_data_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stored zlib result inflating past ``IDEMPOTENCY_MAX_STORED_RESULT_BYTES`` is refused."""
    packed = zlib.compress(b'"' + b"a" * 100_000 + b'"')
    assert 100_002 == len(decode_stored_data(packed))
    monkeypatch.setenv("IDEMPOTENCY_MAX_STORED_RESULT_BYTES", "50000")
    with pytest.raises(DecompressionLimitError):
        decode_stored_data(packed)
    monkeypatch.setenv("IDEMPOTENCY_MAX_STORED_RESULT_BYTES", "0")
    with pytest.raises(IdempotencyConfigError):
        decode_stored_data(packed)


@pytest.mark.parametrize(
    ("table", "account"),
    [
        ("arn:aws:dynamodb:eu-west-1:210987654321:table/idempotency", "210987654321"),
        ("arn:aws-cn:dynamodb:cn-north-1:111122223333:table/t", "111122223333"),
        ("idempotency", None),
        ("arn:aws:s3:::bucket", None),
    ],
)
def test_the_account_comes_from_a_table_arn(table: str, account: str | None) -> None:
    """Only a DynamoDB table ARN names an account."""
    assert account == account_of(table)


class OwnedS3:
    """An S3 double that, like S3, refuses requests whose ExpectedBucketOwner is not the owner."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.objects: dict[tuple[str, str], bytes] = {}

    def _check(self, expected: str | None) -> None:
        if expected is not None and expected != self.owner:
            error = {"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}
            raise ClientError(error, "PutObject")  # type: ignore[arg-type]

    def put_object(self, *, Bucket: str, Key: str, Body: bytes, **options: Any) -> None:  # noqa: N803
        self._check(options.get("ExpectedBucketOwner"))
        self.objects[Bucket, Key] = Body

    def get_object(self, *, Bucket: str, Key: str, **options: Any) -> dict[str, Any]:  # noqa: N803
        self._check(options.get("ExpectedBucketOwner"))
        return {"Body": io.BytesIO(self.objects[Bucket, Key])}


def offload(owner: str | None, s3: OwnedS3) -> LargeResults:
    return LargeResults(
        bucket="results",
        prefix=None,
        threshold_bytes=0,
        client=s3,
        session=None,
        boto_config=None,
        expected_owner=owner,
    )


def test_a_bucket_of_another_account_is_refused() -> None:
    """With the expected owner set, a bucket owned by someone else is never written."""
    s3 = OwnedS3(owner="999999999999")
    with pytest.raises(IdempotencyPersistenceLayerError, match="PutObject failed: AccessDenied"):
        offload("210987654321", s3).encode("k", "o", '"x"', compression_threshold=0)
    assert {} == s3.objects


def test_the_owners_bucket_is_written_and_read_back() -> None:
    """The right owner (here from the table's ARN) writes and resolves the object."""
    s3 = OwnedS3(owner="210987654321")
    large = offload(account_of("arn:aws:dynamodb:eu-west-1:210987654321:table/t"), s3)
    reference = large.encode("k", "o", '"x"', compression_threshold=0)
    assert isinstance(reference, str)
    assert '"x"' == large.resolve(reference)


MIB = 1024 * 1024


def zlib_bomb(inflated_bytes: int) -> bytes:
    """Return zlib data of ``inflated_bytes`` zeros, compressed piece by piece (about 1:1000)."""
    packer = zlib.compressobj(9)
    piece = b"\0" * MIB
    parts = [packer.compress(piece) for _ in range(inflated_bytes // MIB)]
    return b"".join([*parts, packer.flush()])


def peak_bytes_of(action: Any) -> int:
    """Run ``action`` and return the peak of memory it allocated, as tracemalloc counts it."""
    import tracemalloc

    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        baseline = tracemalloc.get_traced_memory()[0]
        action()
        return tracemalloc.get_traced_memory()[1] - baseline
    finally:
        tracemalloc.stop()


def test_the_default_stored_result_limit_leaves_a_128_mb_function_alive() -> None:
    """At most 32 MiB: the inflated text, its decoded copy and the parse fit in what a 128 MB
    function has left once the library and a boto3 client are loaded (about 80 MB)."""
    assert DEFAULT_MAX_STORED_RESULT_BYTES <= 32 * MIB


def test_rejecting_a_bomb_stays_within_the_limit_plus_one_chunk() -> None:
    """Regression: refusing a 65 KB stored bomb peaked at twice the limit (the output so far
    plus a last piece as large as the limit). Now the output grows one chunk at a time."""
    bomb = zlib_bomb(stored_result_limit() + MIB)
    assert len(bomb) < 70_000

    def reject() -> None:
        with pytest.raises(DecompressionLimitError):
            bounded_inflate(bomb)

    peak = peak_bytes_of(reject)
    assert peak <= stored_result_limit() + INFLATE_CHUNK_BYTES + MIB


def test_a_result_at_the_default_limit_is_read_and_parsed_within_80_mb() -> None:
    """A stored HTTP response as large as the default limit allows is inflated, decoded and
    parsed with a peak below the ~80 MB a 128 MB function has left."""
    body_bytes = stored_result_limit() - 100
    text = '{"statusCode":200,"body":"' + "a" * body_bytes + '"}'
    packed = zlib.compress(text.encode(), 1)
    del text

    def read() -> None:
        assert 200 == json.loads(decode_stored_data(packed))["statusCode"]

    assert peak_bytes_of(read) <= 80_000_000
