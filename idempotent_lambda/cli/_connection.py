"""How the CLI reaches AWS: the table's store, its DynamoDB client, the endpoint and the region.

Every command that talks to AWS builds its clients here, from the same options (``--profile``,
``--region``, ``--endpoint-url`` and the store's attribute names), so they all read one table
the same way.
"""

from __future__ import annotations

import argparse
import inspect
import os
from typing import TYPE_CHECKING, Any

from idempotent_lambda.cli._output import CliError
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient


def store_attribute_defaults() -> dict[str, str | None]:
    """Return the attribute-name options of `DynamoDBPersistenceLayer` and their defaults."""
    parameters = inspect.signature(DynamoDBPersistenceLayer).parameters.values()
    return {p.name: p.default for p in parameters if p.name.endswith("_attr")}


def store_from(args: argparse.Namespace) -> DynamoDBPersistenceLayer:
    """Return the store the options describe, on a client built from them."""
    if args.sort_key_attr and not args.static_pk_value:
        raise CliError(
            "--sort-key-attr needs --static-pk-value: the store's partition value, "
            "'idempotency#<function name>' unless the functions set static_pk_value"
        )
    return DynamoDBPersistenceLayer(
        args.table,
        static_pk_value=args.static_pk_value or None,
        boto3_client=client_from(args),
        **{name: getattr(args, name) for name in store_attribute_defaults()},
    )


def endpoint_of(args: argparse.Namespace) -> str | None:
    """Return the endpoint the client talks to, when it is not AWS itself."""
    endpoint: str | None = getattr(args, "endpoint_url", None)
    return (
        endpoint
        or os.environ.get("AWS_ENDPOINT_URL_DYNAMODB")
        or os.environ.get("AWS_ENDPOINT_URL")  # boto3 honours it for every service
        or None
    )


def client_from(args: argparse.Namespace) -> DynamoDBClient:
    """Build a `dynamodb` client; a local endpoint without a region gets `us-east-1`.

    Its timeouts are longer than a function's: a page of a scan may take a while.
    """
    import boto3.session
    from botocore.config import Config

    session = boto3.session.Session(profile_name=args.profile)
    region = args.region or session.region_name or ("us-east-1" if endpoint_of(args) else None)
    if region is None:
        raise CliError("no AWS region: pass --region or set AWS_REGION")
    config = Config(
        retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=30
    )
    return session.client(
        "dynamodb", region_name=region, endpoint_url=args.endpoint_url, config=config
    )


def other_client(args: argparse.Namespace, dynamodb: Any, service: str) -> Any:
    """Return a client of ``service`` in the DynamoDB client's session, region and endpoint."""
    import boto3.session

    session = boto3.session.Session(profile_name=args.profile)
    endpoint = args.endpoint_url or None
    return session.client(  # type: ignore[call-overload]
        service, region_name=dynamodb.meta.region_name, endpoint_url=endpoint
    )
