"""``create-table``: an on-demand table with the right key schema and TTL, for local development."""

from __future__ import annotations

import argparse

from idempotent_lambda._table_setup import create_idempotency_table
from idempotent_lambda.cli import _views
from idempotent_lambda.cli._connection import client_from
from idempotent_lambda.cli._errors import OK


def create_table(args: argparse.Namespace) -> int:
    """Create the table (an existing one is left as it is) and print its actual layout."""
    client = client_from(args)
    create_idempotency_table(
        client,
        table_name=args.table,
        key_attr=args.key_attr,
        sort_key_attr=args.sort_key_attr,
        expiry_attr=args.expiry_attr,
        wait=not args.no_wait,
    )
    description = client.describe_table(TableName=args.table)["Table"]
    keys = {k["KeyType"]: k["AttributeName"] for k in description.get("KeySchema", [])}
    ttl = client.describe_time_to_live(TableName=args.table).get("TimeToLiveDescription", {})
    summary = {
        "table": args.table,
        "status": description.get("TableStatus"),
        "partition_key": keys.get("HASH"),
        "sort_key": keys.get("RANGE"),
        "ttl_attribute": ttl.get("AttributeName"),
        "ttl_status": ttl.get("TimeToLiveStatus"),
    }
    if args.json:
        _views.write_json(summary)
    else:
        sort = f", sort key {summary['sort_key']}" if summary["sort_key"] else ""
        ttl_text = f"TTL on {summary['ttl_attribute']}" if summary["ttl_attribute"] else "TTL off"
        print(f"table {args.table}: partition key {summary['partition_key']}{sort}, {ttl_text}")
    expected = (args.key_attr, args.sort_key_attr)
    if (summary["partition_key"], summary["sort_key"]) != expected:
        _views.note(
            f"warning: the existing table's key schema differs from the requested "
            f"{args.key_attr}/{args.sort_key_attr or '-'}"
        )
    return OK
