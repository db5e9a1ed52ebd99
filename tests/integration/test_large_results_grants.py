"""Offloaded results and the CDK construct's S3 grants: each prefix's grant names its own only.

A key prefix may hold `/`, so one prefix's folder can sit inside another's (`orders/eu` in
`idempotency/orders/`). The construct's grant names the objects whose name starts with the
quoted `<key_prefix>#` (`idempotent_lambda_cdk/_objects.py`, loaded here without the CDK). These
tests write results through the library on moto's S3 and match each object against every
prefix's grant as IAM matches a resource.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent
from idempotent_lambda.persistence.dynamodb import large_result_prefix
from idempotent_lambda.testing import FakeLambdaContext

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

OBJECTS_MODULE = (
    Path(__file__).resolve().parents[2] / "cdk" / "idempotent_lambda_cdk" / "_objects.py"
)
#: Nested folders, a prefix that merely starts like another, and one quoting changes.
PREFIXES = ["orders", "orders/eu", "orders/eu/x", "orders.eu", "ordersx", "orders/é"]
CONFIG = IdempotencyConfig(record_format="native", event_key_jmespath="order_id")


def granted_objects(key_prefix: str) -> str:
    """Return the construct's S3 grant pattern for `key_prefix` (its object-key part)."""
    spec = importlib.util.spec_from_file_location("cdk_objects", OBJECTS_MODULE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pattern: str = module.granted_objects(large_result_prefix(key_prefix), key_prefix)
    return pattern


def iam_matches(pattern: str, key: str) -> bool:
    """Tell whether an IAM resource pattern names `key` (`*`: any run, `?`: any one character)."""
    parts = [re.escape(part).replace(r"\?", ".") for part in pattern.split("*")]
    return re.fullmatch(".*".join(parts), key) is not None


def counting_handler(store: Any, key_prefix: str, runs: list[str]) -> Any:
    """Return a handler of `key_prefix` that notes each run of its body in `runs`."""

    @idempotent(persistence_store=store, config=CONFIG, key_prefix=key_prefix)
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(key_prefix)
        return {"prefix": key_prefix, "order": event["order_id"]}

    return handler


@pytest.mark.parametrize("folder", ["default", "large_result_prefix"])
def test_each_prefix_s_grant_names_its_own_objects_only(
    folder: str,
    idempotency_table: str,
    dynamodb_client: DynamoDBClient,
    s3_client: Any,
    bucket: str,
) -> None:
    """Every prefix offloads (the store's default folder, or the one the docs pass); each
    object matches exactly one grant, its own prefix's; every result replays from it."""
    written: dict[str, str] = {}
    for key_prefix in PREFIXES:
        explicit = (
            {} if folder == "default" else {"large_result_prefix": large_result_prefix(key_prefix)}
        )
        store = DynamoDBPersistenceLayer(
            idempotency_table,
            boto3_client=dynamodb_client,
            large_result_bucket=bucket,
            large_result_threshold_bytes=0,
            s3_client=s3_client,
            **explicit,
        )
        runs: list[str] = []
        handler = counting_handler(store, key_prefix, runs)
        before = {o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket).get("Contents", [])}
        first = handler({"order_id": 7}, FakeLambdaContext())
        (written[key_prefix],) = {
            o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket)["Contents"]
        } - before
        assert first == handler({"order_id": 7}, FakeLambdaContext())
        assert [key_prefix] == runs

    grants = {key_prefix: granted_objects(key_prefix) for key_prefix in PREFIXES}
    for key_prefix, key in written.items():
        assert key.startswith(large_result_prefix(key_prefix))
        covered_by = [other for other, pattern in grants.items() if iam_matches(pattern, key)]
        assert [key_prefix] == covered_by, key
