"""Where the table is and how its items are laid out: the options, and the store they describe."""

from __future__ import annotations

import argparse
import inspect
import os
from typing import TYPE_CHECKING

from idempotent_lambda.cli._views import CliError
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient


def store_attribute_defaults() -> dict[str, str | None]:
    """Return the attribute-name options of `DynamoDBPersistenceLayer` and their defaults."""
    parameters = inspect.signature(DynamoDBPersistenceLayer).parameters.values()
    return {p.name: p.default for p in parameters if p.name.endswith("_attr")}


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--table``, ``--endpoint-url``, ``--region`` and ``--profile``."""
    group = parser.add_argument_group("connection")
    table = os.environ.get("IDEMPOTENCY_TABLE") or None
    group.add_argument(
        "--table",
        required=table is None,
        default=table,
        help="the idempotency table (default: IDEMPOTENCY_TABLE)",
    )
    group.add_argument(
        "--endpoint-url",
        help="a DynamoDB-compatible endpoint, e.g. http://localhost:8000 "
        "(default: AWS_ENDPOINT_URL_DYNAMODB, else AWS)",
    )
    group.add_argument("--region", help="AWS region (default: the profile's or AWS_REGION)")
    group.add_argument("--profile", help="AWS profile to take credentials from")


def add_schema_options(parser: argparse.ArgumentParser, *, names: tuple[str, ...] = ()) -> None:
    """Add the store's attribute-name options (all of them, or those in ``names``)."""
    group = parser.add_argument_group(
        "item layout", "match the DynamoDBPersistenceLayer arguments the functions use"
    )
    for name, default in store_attribute_defaults().items():
        if names and name not in names:
            continue
        shown = "none" if default is None else default
        group.add_argument(
            "--" + name.replace("_", "-"), default=default, metavar="NAME", help=f"({shown})"
        )
    if not names:
        group.add_argument(
            "--static-pk-value",
            metavar="VALUE",
            help="partition value when --sort-key-attr is set (idempotency#<function name>)",
        )


def store_from(args: argparse.Namespace) -> DynamoDBPersistenceLayer:
    """Return the store the options describe, on a client built from them."""
    if args.sort_key_attr and not args.static_pk_value:
        raise CliError(
            "--sort-key-attr needs --static-pk-value: the store's partition value, "
            "'idempotency#<function name>' unless the functions set static_pk_value"
        )
    attributes = {name: getattr(args, name) for name in store_attribute_defaults()}
    return DynamoDBPersistenceLayer(
        args.table,
        static_pk_value=args.static_pk_value or None,
        boto3_client=client_from(args),
        **attributes,
    )


def endpoint_of(args: argparse.Namespace) -> str | None:
    """Return the endpoint the client will talk to, when it is not AWS itself."""
    endpoint: str | None = getattr(args, "endpoint_url", None)
    return endpoint or os.environ.get("AWS_ENDPOINT_URL_DYNAMODB") or None


def client_from(args: argparse.Namespace) -> DynamoDBClient:
    """Build a ``dynamodb`` client from the connection options.

    A local endpoint without a configured region gets ``us-east-1``: it only matters for signing.
    Timeouts are longer than a Lambda function's: a page of a scan may take a while.
    """
    import boto3.session
    from botocore.config import Config

    session = boto3.session.Session(profile_name=args.profile)
    endpoint = endpoint_of(args)
    region = args.region or session.region_name or ("us-east-1" if endpoint else None)
    if region is None:
        raise CliError("no AWS region: pass --region or set AWS_REGION")
    config = Config(
        retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=30
    )
    return session.client(
        "dynamodb", region_name=region, endpoint_url=args.endpoint_url, config=config
    )
