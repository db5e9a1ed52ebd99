"""Create an idempotency table: for tests, local runs and scripts (production uses the template)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import (
        AttributeDefinitionTypeDef,
        KeySchemaElementTypeDef,
    )

logger = logging.getLogger(__name__)


def create_idempotency_table(
    client: DynamoDBClient | None = None,
    *,
    table_name: str,
    endpoint_url: str | None = None,
    region_name: str = "us-east-1",
    key_attr: str = "id",
    sort_key_attr: str | None = None,
    expiry_attr: str = "expiration",
    wait: bool = True,
) -> None:
    """Create an on-demand table laid out for `DynamoDBPersistenceLayer`, with TTL on expiry.

    Safe to call again: an existing table is left as it is (its key schema is not checked).
    Enabling TTL is best effort, since some local endpoints do not support it and the library
    checks expiry in code anyway; a failure there is logged, not raised.

    Args:
        client: A ``dynamodb`` client; by default one is built for ``endpoint_url`` and
            ``region_name`` (``AWS_ENDPOINT_URL_DYNAMODB`` applies when ``endpoint_url`` is None).
        table_name: Name of the table.
        endpoint_url: Endpoint of a local DynamoDB-compatible server, when building the client.
        region_name: Region, when building the client.
        key_attr: Partition key attribute (type S); must match the store's ``key_attr``.
        sort_key_attr: Sort key attribute (type S), for the store's composite-key mode.
        expiry_attr: The store's ``expiry_attr``, made the table's TTL attribute.
        wait: Block until the table is ACTIVE.

    Raises:
        botocore.exceptions.ClientError: The table could not be created.
    """
    if client is None:
        import boto3

        client = boto3.client("dynamodb", endpoint_url=endpoint_url, region_name=region_name)
    key_schema: list[KeySchemaElementTypeDef] = [{"AttributeName": key_attr, "KeyType": "HASH"}]
    attributes: list[AttributeDefinitionTypeDef] = [
        {"AttributeName": key_attr, "AttributeType": "S"}
    ]
    if sort_key_attr is not None:
        key_schema.append({"AttributeName": sort_key_attr, "KeyType": "RANGE"})
        attributes.append({"AttributeName": sort_key_attr, "AttributeType": "S"})
    try:
        client.create_table(
            TableName=table_name,
            KeySchema=key_schema,
            AttributeDefinitions=attributes,
            BillingMode="PAY_PER_REQUEST",
        )
    except client.exceptions.ResourceInUseException:
        logger.debug("table %s already exists", table_name)
    if wait:
        client.get_waiter("table_exists").wait(
            TableName=table_name, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
        )
    _enable_ttl(client, table_name, expiry_attr)


def _enable_ttl(client: DynamoDBClient, table_name: str, expiry_attr: str) -> None:
    """Turn TTL on for ``expiry_attr``, tolerating endpoints that refuse or lack it."""
    try:
        client.update_time_to_live(
            TableName=table_name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": expiry_attr},
        )
    except client.exceptions.ClientError as exc:
        error = exc.response.get("Error", {})
        if "already enabled" in error.get("Message", "").lower():
            return
        code = error.get("Code", "unknown")
        logger.warning("could not enable TTL on %s.%s: %s", table_name, expiry_attr, code)


def describe_idempotency_table(client: DynamoDBClient, table_name: str) -> dict[str, str | None]:
    """Return the table's actual layout: status, partition and sort key, TTL attribute and status.

    Raises:
        botocore.exceptions.ClientError: The table cannot be described (e.g. it does not exist).
    """
    description = client.describe_table(TableName=table_name)["Table"]
    keys = {k["KeyType"]: k["AttributeName"] for k in description.get("KeySchema", [])}
    ttl = client.describe_time_to_live(TableName=table_name).get("TimeToLiveDescription", {})
    return {
        "status": description.get("TableStatus"),
        "partition_key": keys.get("HASH"),
        "sort_key": keys.get("RANGE"),
        "ttl_attribute": ttl.get("AttributeName"),
        "ttl_status": ttl.get("TimeToLiveStatus"),
    }
