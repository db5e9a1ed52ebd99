"""The DynamoDB store's operator methods (what the CLI calls): scan, conditional delete."""

from __future__ import annotations

from typing import TYPE_CHECKING

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyRecord, Status
from idempotent_lambda.persistence.dynamodb._operator import DeleteOutcome

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

NOW_MS = 1_800_000_000_000


def claimed(key: str, *, lease_ms: int, owner: str = "o") -> IdempotencyRecord:
    """Return an IN_PROGRESS record whose lease ends at ``lease_ms``."""
    return IdempotencyRecord(
        idempotency_key=key,
        status=Status.IN_PROGRESS,
        expiry_timestamp=NOW_MS // 1000 + 3600,
        in_progress_expiry_timestamp=lease_ms,
        owner=owner,
    )


def test_delete_keeps_a_live_claim_unless_no_cutoff_is_given(
    dynamodb_store: DynamoDBPersistenceLayer,
) -> None:
    """With a cutoff a live claim is kept and returned; without one it is deleted and returned."""
    live = claimed("k#live", lease_ms=NOW_MS + 60_000)
    assert dynamodb_store.claim(live, now_ms=NOW_MS, lease_cutoff_ms=NOW_MS).claimed

    assert DeleteOutcome(False, live) == dynamodb_store.delete("k#live", live_cutoff_ms=NOW_MS)
    assert DeleteOutcome(True, live) == dynamodb_store.delete("k#live")
    assert DeleteOutcome(False, None) == dynamodb_store.delete("k#live")


def test_delete_takes_a_claim_whose_lease_passed(dynamodb_store: DynamoDBPersistenceLayer) -> None:
    """A claim whose lease ended before the cutoff is deleted even with a cutoff."""
    stuck = claimed("k#stuck", lease_ms=NOW_MS - 1)
    assert dynamodb_store.claim(stuck, now_ms=NOW_MS, lease_cutoff_ms=NOW_MS - 10).claimed
    assert DeleteOutcome(True, stuck) == dynamodb_store.delete("k#stuck", live_cutoff_ms=NOW_MS)
    assert dynamodb_store.get("k#stuck") is None


def test_scan_pages_filters_by_prefix_and_counts_foreign_items(
    dynamodb_store: DynamoDBPersistenceLayer,
    dynamodb_client: DynamoDBClient,
    idempotency_table: str,
) -> None:
    """Every page is returned; other prefixes are filtered out; foreign items are counted."""
    for key in ("a#1", "a#2", "b#1"):
        record = claimed(key, lease_ms=NOW_MS + 60_000)
        assert dynamodb_store.claim(record, now_ms=NOW_MS, lease_cutoff_ms=NOW_MS).claimed
    dynamodb_client.put_item(TableName=idempotency_table, Item={"id": {"S": "a#foreign"}})

    pages = list(dynamodb_store.scan(prefix="a#", page_size=1))

    assert len(pages) >= 4
    assert 4 == sum(page.scanned for page in pages)
    assert 1 == sum(page.skipped for page in pages)
    assert ["a#1", "a#2"] == sorted(r.idempotency_key for p in pages for r in p.records)
