"""The table commands: ``records list|get|delete|release-stuck`` and ``create-table``.

They work through `DynamoDBPersistenceLayer`'s operator methods (``scan``, ``get``, ``delete``,
``release_if_stuck``), and ``create-table`` through `persistence.dynamodb._operator`: no command
sends a request of its own, so the conditions and the item format exist once, in persistence.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import Any, NoReturn

from idempotent_lambda._clock import SYSTEM_CLOCK
from idempotent_lambda._engine import CLOCK_SKEW_TOLERANCE_MS
from idempotent_lambda.cli import _views
from idempotent_lambda.cli._connection import client_from, store_from
from idempotent_lambda.cli._terminal import confirm, escape_text
from idempotent_lambda.cli._views import NOT_FOUND, OK, CliError
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.persistence.dynamodb._operator import (
    create_idempotency_table,
    describe_idempotency_table,
)
from idempotent_lambda.record import IdempotencyRecord, Status

#: What ``records delete`` cannot reach: results cached in the memory of warm instances.
LOCAL_CACHE_NOTE = (
    "note: functions with use_local_cache=True may replay this result from a warm instance's "
    "memory until that instance is recycled or the record's expiry passes"
)
LIST_HEADERS = ("KEY", "STATUS", "EXPIRES", "LEASE", "OWNER")


def now_and_cutoff() -> tuple[int, int]:
    """Return now, and the cutoff before which a lease counts as passed (as the engine sees it)."""
    now = SYSTEM_CLOCK.now_ms()
    return now, now - CLOCK_SKEW_TOLERANCE_MS


def list_records(args: argparse.Namespace) -> int:
    """``records list``: print the records that match the filters (never their results)."""
    store = store_from(args)
    now, cutoff = now_and_cutoff()
    progress = _views.Progress(enabled=not args.quiet)
    views = []
    for record in _records(store, args, progress):
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
    record = store_from(args).get(args.key, fetch_large_result=False)
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
    now, cutoff = now_and_cutoff()
    store = store_from(args)
    if args.force and not args.yes:
        _confirm_forced(store.get(args.key), args.key, cutoff)
    outcome = store.delete(args.key, live_cutoff_ms=None if args.force else cutoff)
    deleted = outcome.record
    if not outcome.deleted or deleted is None:
        _refuse_delete(deleted, args.key, now)
    shown = _views.view(deleted, now_ms=now, cutoff_ms=cutoff)
    if args.json:
        _views.write_json({"deleted": True, "record": shown})
    else:
        print(f"deleted {deleted.idempotency_key} (was {shown['status']})")
    _views.note(LOCAL_CACHE_NOTE)
    return OK


def release_stuck(args: argparse.Namespace) -> int:
    """``records release-stuck``: list stuck records (dry run), or delete them with ``--yes``.

    A stuck record does no harm on its own (the next claim takes it over), but it shows up as
    in-progress to ``records get`` and in alarms. Each delete is fenced on what the scan saw
    (`DynamoDBPersistenceLayer.release_if_stuck`), so an owner that claimed the key in the
    meantime is never touched.
    """
    store = store_from(args)
    now, cutoff = now_and_cutoff()
    progress = _views.Progress(enabled=not args.quiet)
    stuck = []
    for record in _records(store, args, progress):
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
        done = store.release_if_stuck(record, cutoff_ms=cutoff)
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


def create_table(args: argparse.Namespace) -> int:
    """``create-table``: create the table (an existing one is kept) and print its layout."""
    client = client_from(args)
    create_idempotency_table(
        client,
        table_name=args.table,
        key_attr=args.key_attr,
        sort_key_attr=args.sort_key_attr,
        expiry_attr=args.expiry_attr,
        wait=not args.no_wait,
    )
    summary = {"table": args.table, **describe_idempotency_table(client, args.table)}
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


def _records(
    store: DynamoDBPersistenceLayer, args: argparse.Namespace, progress: _views.Progress
) -> Iterator[IdempotencyRecord]:
    """Yield the records of the table under ``--prefix``, counting pages in ``progress``."""
    for page in store.scan(prefix=args.prefix, page_size=args.page_size):
        progress.page(page.scanned, page.skipped)
        yield from page.records


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


def _refuse_delete(record: IdempotencyRecord | None, key: str, now: int) -> NoReturn:
    """Raise the error that says why nothing was deleted."""
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
