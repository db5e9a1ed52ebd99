"""Assertions on the DynamoDB requests a batch made, counted by operation (botocore hooks)."""

from __future__ import annotations

from collections import Counter


def assert_requests(
    requests: Counter[str], *, completions: int, released_together: bool = False, **exact: int
) -> None:
    """Assert the operations counted: ``exact`` ones exactly, and ``completions`` completions
    written together, in one ``BatchWriteItem`` at least and one per completion at most (how
    many records finish while a request is out depends on timing, never on correctness);
    ``released_together``: claims taken ahead were deleted together too, in one request more."""
    grouped = requests.get("BatchWriteItem", 0)
    least = (1 if completions else 0) + released_together
    assert least <= grouped <= completions + released_together, dict(requests)
    assert exact == {op: n for op, n in requests.items() if op != "BatchWriteItem"}
