"""``records list|get|delete``: look at the records of an idempotency table, remove one."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from idempotent_lambda._clock import SYSTEM_CLOCK
from idempotent_lambda._engine import CLOCK_SKEW_TOLERANCE_MS
from idempotent_lambda.cli import _views
from idempotent_lambda.cli._connection import client_from, schema_from
from idempotent_lambda.cli._errors import NOT_FOUND, OK, CliError
from idempotent_lambda.cli._scan import Progress, records
from idempotent_lambda.cli._terminal import confirm, escape_text
from idempotent_lambda.record import IdempotencyRecord, Status

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

    from idempotent_lambda.persistence._dynamodb_item import ItemSchema

LIST_HEADERS = ("KEY", "STATUS", "EXPIRES", "LEASE", "OWNER")


def now_and_cutoff() -> tuple[int, int]:
    """Return now, and the cutoff before which a lease counts as passed (as the engine sees it)."""
    now = SYSTEM_CLOCK.now_ms()
    return now, now - CLOCK_SKEW_TOLERANCE_MS


def list_records(args: argparse.Namespace) -> int:
    """``records list``: print the records that match the filters (never their results)."""
    client, schema = client_from(args), schema_from(args)
    now, cutoff = now_and_cutoff()
    progress = Progress(enabled=not args.quiet)
    views = []
    for record in records(
        client, args.table, schema, prefix=args.prefix, page_size=args.page_size, progress=progress
    ):
        if args.stuck and not _views.is_stuck(record, cutoff):
            continue
        if args.status and record.effective_status(now).value != args.status:
            continue
        views.append(_views.view(record, now_ms=now, cutoff_ms=cutoff))
        progress.matched += 1
        if args.limit and len(views) >= args.limit:
            break
    progress.done()
    if args.json:
        _views.write_json(views)
    else:
        if views:
            print(escape_text(_views.table(LIST_HEADERS, [row(v) for v in views])))
        if not args.quiet:
            _views.note(f"{len(views)} record{'' if len(views) == 1 else 's'}")
    return OK


def get_record(args: argparse.Namespace) -> int:
    """``records get KEY``: print one record with its decoded result and its times.

    A result offloaded to S3 is shown as its object's location, size and checksum, not fetched.
    """
    client, schema = client_from(args), schema_from(args)
    record = read(client, args.table, schema, args.key)
    if record is None:
        raise CliError(f"no record with key {args.key!r}", NOT_FOUND)
    now, cutoff = now_and_cutoff()
    shown = _views.view(record, now_ms=now, cutoff_ms=cutoff)
    if not args.no_data:
        shown = _views.with_result(shown, record)
    if args.json:
        _views.write_json(shown)
    else:
        print(escape_text(_detail(shown)))
    return OK


def delete_record(args: argparse.Namespace) -> int:
    """``records delete KEY``: delete one record; a live IN_PROGRESS one only with --force,
    confirmed on the terminal or by --yes."""
    client, schema = client_from(args), schema_from(args)
    now, cutoff = now_and_cutoff()
    if args.force and not args.yes:
        _confirm_forced(read(client, args.table, schema, args.key), args.key, cutoff)
    names = {"#key": schema.idempotency_key_attr}
    values: dict[str, Any] = {}
    condition = "attribute_exists(#key)"
    if not args.force:
        names |= {
            "#status": schema.status_attr,
            "#lease": schema.in_progress_expiry_attr,
            "#expiry": schema.expiry_attr,
        }
        values = {
            ":in_progress": {"S": Status.IN_PROGRESS.value},
            ":cutoff_ms": {"N": str(cutoff)},
            ":cutoff_s": {"N": str(cutoff // 1000)},
        }
        condition += (
            " AND (#status <> :in_progress OR #lease < :cutoff_ms"
            " OR (attribute_not_exists(#lease) AND #expiry < :cutoff_s))"
        )
    request: dict[str, Any] = {
        "TableName": args.table,
        "Key": schema.key(args.key),
        "ConditionExpression": condition,
        "ExpressionAttributeNames": names,
        "ReturnValues": "ALL_OLD",
    }
    if values:
        request["ExpressionAttributeValues"] = values
    try:
        response = client.delete_item(**request)
    except client.exceptions.ConditionalCheckFailedException:
        _refuse_delete(read(client, args.table, schema, args.key), args.key, now)
        raise  # pragma: no cover - _refuse_delete always raises
    deleted = schema.from_item(response.get("Attributes", {}))
    shown = _views.view(deleted, now_ms=now, cutoff_ms=cutoff)
    if args.json:
        _views.write_json({"deleted": True, "record": shown})
    else:
        print(f"deleted {deleted.idempotency_key} (was {shown['status']})")
    return OK


def read(
    client: DynamoDBClient, table: str, schema: ItemSchema, key: str
) -> IdempotencyRecord | None:
    """Read one record (strongly consistent); None when absent."""
    response = client.get_item(TableName=table, Key=schema.key(key), ConsistentRead=True)
    item = response.get("Item")
    return None if item is None else schema.from_item(item)


def _confirm_forced(record: IdempotencyRecord | None, key: str, cutoff: int) -> None:
    """Ask before deleting a live IN_PROGRESS record: its invocation may still be running."""
    if record is None or record.status is not Status.IN_PROGRESS or _views.is_stuck(record, cutoff):
        return
    question = (
        f"{escape_text(key)} is IN_PROGRESS with a live lease: an invocation may be running it, "
        "and a retry after the delete runs the handler again. Delete it?"
    )
    if not confirm(question):
        raise CliError(
            f"not deleted: record {key!r} is IN_PROGRESS with a live lease; confirm on a "
            "terminal, or pass --yes with --force"
        )


def _refuse_delete(record: IdempotencyRecord | None, key: str, now: int) -> None:
    if record is None:
        raise CliError(f"no record with key {key!r}", NOT_FOUND)
    lease = record.in_progress_expiry_timestamp
    ends = "" if lease is None else f" (ends {_views.relative(lease - now)})"
    raise CliError(
        f"record {key!r} is IN_PROGRESS with a live lease{ends}: an invocation may be running "
        "it; wait for the lease to end, or pass --force"
    )


def row(shown: dict[str, Any]) -> list[str]:
    """Return the table row of a record view."""
    expires = shown["expires_in_seconds"]
    lease = shown["lease_remaining_seconds"]
    if shown["stored_status"] != Status.IN_PROGRESS.value:
        lease_text = "-"
    elif lease is None:
        lease_text = "until expiry"
    else:
        lease_text = ("STUCK, ended " if shown["stuck"] else "") + _views.relative(
            int(lease * 1000)
        )
    return [
        shown["key"],
        shown["status"],
        _views.relative(None if expires is None else expires * 1000),
        lease_text,
        (shown["owner"] or "-")[:8],
    ]


def _detail(shown: dict[str, Any]) -> str:
    def when(at: str | None, seconds: float | None) -> str:
        if at is None:
            return "-"
        return f"{at} ({_views.relative(None if seconds is None else int(seconds * 1000))})"

    status = shown["status"]
    if status != shown["stored_status"]:
        status += f" (stored as {shown['stored_status']})"
    if shown["stuck"]:
        status += ", STUCK: lease passed"
    rows = [
        ("key", shown["key"]),
        ("status", status),
        ("expires", when(shown["expires_at"], shown["expires_in_seconds"])),
        ("lease ends", when(shown["lease_ends_at"], shown["lease_remaining_seconds"])),
        ("owner", shown["owner"] or "-"),
        ("validation", shown["validation_hash"] or "-"),
    ]
    text = "\n".join(f"{name:<11} {value}" for name, value in rows)
    if "result" not in shown:
        return text
    if shown["unstorable_reason"] is not None:
        return f"{text}\nresult      not stored: {shown['unstorable_reason']}"
    offloaded = shown["offloaded"]
    if offloaded is not None:
        if offloaded.get("malformed"):
            return f"{text}\nresult      offloaded to S3, but the reference is malformed"
        return (
            f"{text}\nresult      offloaded to S3 (not fetched): "
            f"s3://{offloaded['bucket']}/{offloaded['key']}\n"
            f"            {offloaded['size']} bytes, zlib-compressed, sha256 {offloaded['sha256']}"
        )
    if shown["stored_data"] is None:
        return f"{text}\nresult      -"
    rendered = json.dumps(shown["result"], indent=2, ensure_ascii=False)
    return f"{text}\nresult      " + rendered.replace("\n", "\n            ")
