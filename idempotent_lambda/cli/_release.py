"""``records release-stuck``: delete IN_PROGRESS records whose lease has passed.

A stuck record does no harm on its own (the next claim takes it over), but it shows up as
in-progress to ``records get`` and in alarms. Each delete is conditional on what the scan saw:
still IN_PROGRESS, same owner token, lease still passed. An owner that claimed the key in the
meantime has a new token and a live lease, so it is never touched.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from idempotent_lambda.cli import _views
from idempotent_lambda.cli._connection import client_from, schema_from
from idempotent_lambda.cli._errors import OK
from idempotent_lambda.cli._records import LIST_HEADERS, now_and_cutoff, row
from idempotent_lambda.cli._scan import Progress, records
from idempotent_lambda.record import IdempotencyRecord, Status

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

    from idempotent_lambda.persistence._dynamodb_item import ItemSchema


def release_stuck(args: argparse.Namespace) -> int:
    """List stuck records (dry run), or delete them with ``--yes``."""
    client, schema = client_from(args), schema_from(args)
    now, cutoff = now_and_cutoff()
    progress = Progress(enabled=not args.quiet)
    stuck = []
    for record in records(
        client, args.table, schema, prefix=args.prefix, page_size=args.page_size, progress=progress
    ):
        if _views.is_stuck(record, cutoff):
            stuck.append(record)
            progress.matched += 1
    progress.done()
    views = [_views.view(r, now_ms=now, cutoff_ms=cutoff) for r in stuck]
    if not args.yes:
        if args.json:
            _views.write_json({"dry_run": True, "stuck": views, "released": [], "skipped": []})
            return OK
        if views:
            print(_views.table(LIST_HEADERS, [row(v) for v in views]))
        _views.note(
            f"dry run: {len(views)} stuck record{'' if len(views) == 1 else 's'} would be "
            "released; run again with --yes to release them"
        )
        return OK
    released: list[str] = []
    skipped: list[str] = []
    for record in stuck:
        done = release(client, args.table, schema, record, cutoff_ms=cutoff)
        (released if done else skipped).append(record.idempotency_key)
        if not args.json:
            action = "released" if done else "left alone (changed since it was read):"
            print(f"{action} {record.idempotency_key}")
    if args.json:
        _views.write_json(
            {"dry_run": False, "stuck": views, "released": released, "skipped": skipped}
        )
    else:
        _views.note(f"released {len(released)}, left alone {len(skipped)}")
    return OK


def release(
    client: DynamoDBClient,
    table: str,
    schema: ItemSchema,
    seen: IdempotencyRecord,
    *,
    cutoff_ms: int,
) -> bool:
    """Delete ``seen`` if it is still the same stuck claim; return whether it was deleted.

    The condition is ``status = IN_PROGRESS AND owner = :seen_owner AND lease < :cutoff`` (for a
    record without a lease end: expiration passed), so a record claimed again since it was read
    is left alone.
    """
    names = {"#status": schema.status_attr, "#owner": schema.owner_attr}
    values: dict[str, Any] = {":in_progress": {"S": Status.IN_PROGRESS.value}}
    owner = "attribute_not_exists(#owner)"
    if seen.owner is not None:
        owner = "#owner = :owner"
        values[":owner"] = {"S": seen.owner}
    if seen.in_progress_expiry_timestamp is not None:
        names["#lease"] = schema.in_progress_expiry_attr
        values[":cutoff_ms"] = {"N": str(cutoff_ms)}
        lease = "#lease < :cutoff_ms"
    else:
        names |= {"#lease": schema.in_progress_expiry_attr, "#expiry": schema.expiry_attr}
        values[":cutoff_s"] = {"N": str(cutoff_ms // 1000)}
        lease = "attribute_not_exists(#lease) AND #expiry < :cutoff_s"
    try:
        client.delete_item(
            TableName=table,
            Key=schema.key(seen.idempotency_key),
            ConditionExpression=f"#status = :in_progress AND {owner} AND {lease}",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )
    except client.exceptions.ConditionalCheckFailedException:
        return False
    return True
