"""A custom store in Powertools' documented style (BasePersistenceLayer on a boto3 Table)."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest

from idempotent_lambda import BasePersistenceLayer, IdempotencyConfig, idempotent_function
from idempotent_lambda.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
)
from idempotent_lambda.persistence.base import DataRecord


class MyOwnPersistenceLayer(BasePersistenceLayer):
    """Records in a DynamoDB table through the boto3 resource API, with a conditional put."""

    def __init__(self, table_name: str, endpoint_url: str, key_attr: str = "id") -> None:
        resource = boto3.session.Session().resource(
            "dynamodb", endpoint_url=endpoint_url, region_name="us-east-1"
        )
        self._resource = resource
        self.table = resource.Table(table_name)
        self.key_attr = key_attr
        super().__init__()

    def _item_to_data_record(self, item: dict[str, Any]) -> DataRecord:
        return DataRecord(
            idempotency_key=item[self.key_attr],
            status=item["status"],
            expiry_timestamp=item["expiration"],
            in_progress_expiry_timestamp=item.get("in_progress_expiration"),
            response_data=item.get("data", ""),
            payload_hash=item.get("validation", ""),
        )

    def _get_record(self, idempotency_key: str) -> DataRecord:
        response = self.table.get_item(Key={self.key_attr: idempotency_key}, ConsistentRead=True)
        if "Item" not in response:
            raise IdempotencyItemNotFoundError
        return self._item_to_data_record(response["Item"])

    def _put_record(self, data_record: DataRecord) -> None:
        item = {
            self.key_attr: data_record.idempotency_key,
            "expiration": data_record.expiry_timestamp,
            "in_progress_expiration": data_record.in_progress_expiry_timestamp,
            "status": data_record.status,
        }
        if self.payload_validation_enabled:
            item["validation"] = data_record.payload_hash
        now = datetime.datetime.now()
        try:
            self.table.put_item(
                Item=item,
                ConditionExpression=f"attribute_not_exists({self.key_attr}) OR expiration < :now",
                ExpressionAttributeValues={":now": int(now.timestamp())},
            )
        except self._resource.meta.client.exceptions.ConditionalCheckFailedException:
            raise IdempotencyItemAlreadyExistsError from None

    def _update_record(self, data_record: DataRecord) -> None:
        self.table.update_item(
            Key={self.key_attr: data_record.idempotency_key},
            UpdateExpression="SET #data = :data, expiration = :expiry, #status = :status",
            ExpressionAttributeNames={"#data": "data", "#status": "status"},
            ExpressionAttributeValues={
                ":data": data_record.response_data,
                ":expiry": data_record.expiry_timestamp,
                ":status": data_record.status,
            },
        )

    def _delete_record(self, data_record: DataRecord) -> None:
        self.table.delete_item(Key={self.key_attr: data_record.idempotency_key})


@pytest.fixture
def store(make_table: Callable[..., str], dynamodb_endpoint: str) -> MyOwnPersistenceLayer:
    """Return the custom store on a fresh table."""
    return MyOwnPersistenceLayer(make_table(), dynamodb_endpoint)


def test_custom_store_replays(store: MyOwnPersistenceLayer, lambda_context: Any) -> None:
    """Put, update, then a replay from the custom store's table."""
    config = IdempotencyConfig(event_key_jmespath="order_id")
    runs: list[int] = []

    @idempotent_function(data_keyword_argument="order", persistence_store=store, config=config)
    def process_order(order: dict[str, Any]) -> dict[str, Any]:
        runs.append(order["order_id"])
        return {"order_id": order["order_id"], "status": "PAID"}

    config.register_lambda_context(lambda_context)
    first = process_order(order={"order_id": 3})
    replay = process_order(order={"order_id": 3})

    assert first == replay
    assert [3] == runs
    (item,) = store.table.scan(ConsistentRead=True)["Items"]
    assert "COMPLETED" == item["status"]


def test_custom_store_refuses_a_concurrent_duplicate(store: MyOwnPersistenceLayer) -> None:
    """While one invocation runs, a duplicate gets `IdempotencyAlreadyInProgressError`."""
    started, finish = threading.Event(), threading.Event()

    @idempotent_function(data_keyword_argument="order", persistence_store=store)
    def process_order(order: dict[str, Any]) -> str:
        started.set()
        assert finish.wait(60)
        return "done"

    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(process_order, order={"id": 1})
        assert started.wait(60)
        with pytest.raises(IdempotencyAlreadyInProgressError):
            process_order(order={"id": 1})
        finish.set()
        assert "done" == first.result(60)
    assert "done" == process_order(order={"id": 1})
