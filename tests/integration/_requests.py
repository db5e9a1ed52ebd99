"""Assertions on the DynamoDB requests a batch made, counted by operation (botocore hooks)."""

from __future__ import annotations

from collections import Counter


def assert_requests(requests: Counter[str], *, completions: int, **exact: int) -> None:
    """Assert the operations counted: ``exact`` ones exactly, and ``completions`` completions
    written together, in one ``BatchWriteItem`` at least and one per completion at most (how
    many records finish while a request is out depends on timing, never on correctness)."""
    grouped = requests.get("BatchWriteItem", 0)
    assert (1 if completions else 0) <= grouped <= completions, dict(requests)
    assert exact == {op: n for op, n in requests.items() if op != "BatchWriteItem"}
