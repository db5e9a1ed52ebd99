"""``records get`` of a record whose result is in S3: labelled, never shown as the result."""

from __future__ import annotations

import base64
import json
import os
from typing import TYPE_CHECKING, Any

import pytest

from idempotent_lambda import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    IdempotencyRecord,
    Status,
    idempotent,
)
from idempotent_lambda._clock import SYSTEM_CLOCK
from idempotent_lambda._identity import digest
from idempotent_lambda.cli import main

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

CONFIG = IdempotencyConfig(record_format="native", event_key_jmespath="order_id")  # offloads
#: About 130 KB of random text: over the 1 KB threshold used below.
BIG = base64.b64encode(os.urandom(100_000)).decode()


@pytest.fixture
def offloaded_key(
    idempotency_table: str, dynamodb_client: DynamoDBClient, s3_client: Any, bucket: str
) -> str:
    """Run a handler whose result is offloaded; return its record's key."""
    store = DynamoDBPersistenceLayer(
        idempotency_table,
        boto3_client=dynamodb_client,
        large_result_bucket=bucket,
        large_result_threshold_bytes=1024,
        s3_client=s3_client,
    )

    @idempotent(persistence_store=store, config=CONFIG, key_prefix="reports")
    def handler(event: dict[str, Any], context: Any) -> dict[str, str]:
        return {"report": BIG}

    handler({"order_id": 7}, None)
    return f"reports#{digest(CONFIG, 7)}"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Run the CLI in-process; return its exit code and stdout."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out


def test_get_labels_an_offloaded_result_with_its_object(
    capsys: pytest.CaptureFixture[str],
    idempotency_table: str,
    dynamodb_endpoint: str,
    bucket: str,
    s3_client: Any,
    offloaded_key: str,
) -> None:
    """Text and JSON output name bucket, key and size instead of printing the reference."""
    options = ["--table", idempotency_table, "--endpoint-url", dynamodb_endpoint]
    (stored,) = s3_client.list_objects_v2(Bucket=bucket)["Contents"]

    code, out = run(capsys, "records", "get", "--data", *options, offloaded_key)
    _, as_json = run(capsys, "records", "get", "--json", "--data", *options, offloaded_key)

    assert 0 == code
    assert f"offloaded to S3 (not fetched): s3://{bucket}/{stored['Key']}" in out
    assert f"{stored['Size']} bytes" in out
    assert "$s3" not in out
    assert BIG not in out
    shown = json.loads(as_json)
    assert shown["result"] is None
    assert {"bucket": bucket, "key": stored["Key"], "size": stored["Size"]} == {
        k: shown["offloaded"][k] for k in ("bucket", "key", "size")
    }
    assert 64 == len(shown["offloaded"]["sha256"])


def test_get_of_a_result_in_the_item_has_no_offload_label(
    capsys: pytest.CaptureFixture[str],
    idempotency_table: str,
    dynamodb_endpoint: str,
    dynamodb_store: DynamoDBPersistenceLayer,
) -> None:
    """An ordinary result is shown as before, with ``offloaded`` null in JSON."""
    options = ["--table", idempotency_table, "--endpoint-url", dynamodb_endpoint]
    _seed(dynamodb_store, "orders#small", '{"ok":1}')

    _, out = run(capsys, "records", "get", "--json", "--data", *options, "orders#small")

    shown = json.loads(out)
    assert ({"ok": 1}, None) == (shown["result"], shown["offloaded"])


def test_get_of_a_malformed_reference_says_so(
    capsys: pytest.CaptureFixture[str],
    idempotency_table: str,
    dynamodb_endpoint: str,
    dynamodb_store: DynamoDBPersistenceLayer,
) -> None:
    """A reference that cannot be read is labelled malformed, not printed as a result."""
    options = ["--table", idempotency_table, "--endpoint-url", dynamodb_endpoint]
    _seed(dynamodb_store, "orders#broken", '{"$s3":{"bucket":"b"}}')

    code, out = run(capsys, "records", "get", "--data", *options, "orders#broken")

    assert 0 == code
    assert "offloaded to S3, but the reference is malformed" in out


def _seed(store: DynamoDBPersistenceLayer, key: str, data: str) -> None:
    now = SYSTEM_CLOCK.now_ms()
    claim = IdempotencyRecord(
        idempotency_key=key,
        status=Status.IN_PROGRESS,
        expiry_timestamp=now // 1000 + 3600,
        in_progress_expiry_timestamp=now + 600_000,
        owner="owner",
    )
    assert store.claim(claim, now_ms=now, lease_cutoff_ms=now).claimed
    done = IdempotencyRecord(
        idempotency_key=key,
        status=Status.COMPLETED,
        expiry_timestamp=claim.expiry_timestamp,
        response_data=data,
        owner="owner",
    )
    assert store.complete(done)
