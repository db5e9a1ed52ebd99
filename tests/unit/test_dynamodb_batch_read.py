"""The DynamoDB store's batch read: chunks of 100, unprocessed keys asked again, then given up."""

from __future__ import annotations

from typing import Any

from idempotent_lambda import DynamoDBPersistenceLayer
from idempotent_lambda.record import Status


def item(key: str) -> dict[str, Any]:
    """Return the stored item of a COMPLETED record for ``key``."""
    return {
        "id": {"S": key},
        "status": {"S": "COMPLETED"},
        "expiration": {"N": "4000000000"},
        "data": {"S": '"ok"'},
    }


class FlakyBatchGetClient:
    """A client whose BatchGetItem leaves the last ``unprocessed`` keys unread ``times`` times."""

    def __init__(self, *, unprocessed: int, times: int) -> None:
        self.unprocessed = unprocessed
        self.times = times
        self.requests: list[int] = []

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:  # noqa: N803
        (table, request), *_ = RequestItems.items()
        keys = [key["id"]["S"] for key in request["Keys"]]
        self.requests.append(len(keys))
        left = keys[len(keys) - self.unprocessed :] if self.times and self.unprocessed else []
        if left:
            self.times -= 1
        read = keys[: len(keys) - len(left)]
        unprocessed = {table: {"Keys": [{"id": {"S": key}} for key in left]}} if left else {}
        return {"Responses": {table: [item(key) for key in read]}, "UnprocessedKeys": unprocessed}


def test_keys_are_read_in_chunks_of_100_without_repeats() -> None:
    """250 distinct keys (plus repeats) take three requests of at most 100 keys."""
    client = FlakyBatchGetClient(unprocessed=0, times=0)
    store = DynamoDBPersistenceLayer("T", boto3_client=client)
    keys = [f"k{n}" for n in range(250)]
    found = store.get_many(keys + keys[:10])
    assert [100, 100, 50] == client.requests
    assert set(keys) == set(found)
    assert all(record.status is Status.COMPLETED for record in found.values())


def test_unprocessed_keys_are_asked_again() -> None:
    """Keys DynamoDB left unprocessed twice are read on the third request."""
    client = FlakyBatchGetClient(unprocessed=3, times=2)
    store = DynamoDBPersistenceLayer("T", boto3_client=client)
    keys = [f"k{n}" for n in range(10)]
    assert set(keys) == set(store.get_many(keys))
    assert [10, 3, 3] == client.requests


def test_keys_left_unprocessed_too_long_are_left_out() -> None:
    """After a bounded number of requests the keys still unread are simply not returned."""
    client = FlakyBatchGetClient(unprocessed=2, times=100)
    store = DynamoDBPersistenceLayer("T", boto3_client=client)
    keys = [f"k{n}" for n in range(5)]
    assert set(keys[:3]) == set(store.get_many(keys))
    assert [5, 2, 2, 2] == client.requests
