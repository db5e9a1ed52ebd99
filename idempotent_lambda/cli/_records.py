"""The table commands: `records list|get|delete|release-stuck` and `create-table`.

They work through the operator methods of `DynamoDBPersistenceLayer` (`scan`, `inspect`,
`delete`, `release_if_stuck`): no command sends a request of its own, so the conditions and the
item format exist once, in the store. Those methods read records of either format (Powertools'
or the native one), so one table written by both shows and repairs as one.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from idempotent_lambda._claim import CLOCK_SKEW_TOLERANCE_MS
from idempotent_lambda._clock import SYSTEM_CLOCK
from idempotent_lambda.cli._connection import client_from, store_from
from idempotent_lambda.cli._output import (
    NOT_FOUND,
    OK,
    CliError,
    Rows,
    Screen,
    confirm,
    detail,
    escape_text,
    is_stuck,
    relative,
    row,
    view,
)
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer, _operator
from idempotent_lambda.persistence.dynamodb._record_view import RecordView
from idempotent_lambda.record import IdempotencyRecord, Status

if TYPE_CHECKING:
    pass

#: What `records delete` cannot reach: results cached in the memory of warm instances.
LOCAL_CACHE_NOTE = (
    "note: functions with use_local_cache=True may replay this result from a warm instance's "
    "memory until that instance is recycled or the record's expiry passes"
)
#: The record format a view assumes when not told (``records get --record-format``): the
#: config's default, as the functions have it unless they set one.
RECORD_FORMAT = IdempotencyConfig().record_format
LIST_HEADERS = ("KEY", "STATUS", "EXPIRES", "LEASE", "OWNER")
#: On a narrow terminal the key gives way first (cut in its middle), then the owner; the status,
#: the lease and the times stay whole.
KEY_FIRST = (0, 4)


# --- the commands ---------------------------------------------------------------------------


def now_and_cutoff() -> tuple[int, int]:
    """Return now, and the cutoff before which a lease counts as passed (as the engine sees it)."""
    now = SYSTEM_CLOCK.now_ms()
    return now, now - CLOCK_SKEW_TOLERANCE_MS


def list_records(args: argparse.Namespace, screen: Screen) -> int:
    """`records list`: print the records that match the filters, as they are found."""
    now, cutoff = now_and_cutoff()
    scan = _Scan(store_from(args), args, screen)
    table = Rows(screen, LIST_HEADERS, cut=KEY_FIRST, middle=0)
    for records in scan.pages():
        views = [
            view(RecordView.of(r, RECORD_FORMAT), now_ms=now, cutoff_ms=cutoff)
            for r in records
            if (not args.stuck or is_stuck(r, cutoff))
            and (not args.status or r.effective_status(now).value == args.status)
        ]
        if args.limit:
            views = views[: args.limit - scan.matched]
        scan.matched += len(views)
        if args.json:
            for shown in views:
                screen.json(shown)
        else:
            table.add([row(shown) for shown in views])
        if args.limit and scan.matched >= args.limit:
            break
    scan.summary(table)
    if not args.json and not args.quiet:
        screen.note(f"{scan.matched} record{'' if scan.matched == 1 else 's'}")
    return OK


def get_record(args: argparse.Namespace, screen: Screen) -> int:
    """`records get KEY`: print one record and its times; its result only with `--data`.

    A result offloaded to S3 is shown as its object's location, size and checksum, not fetched.
    """
    found = store_from(args).read(args.key, args.record_format or RECORD_FORMAT)
    if found is None:
        raise CliError(f"no record with key {args.key!r}", NOT_FOUND)
    now, cutoff = now_and_cutoff()
    shown = view(found, now_ms=now, cutoff_ms=cutoff, data=args.data)
    if args.json:
        screen.json(shown)
    else:
        hidden = found.record.response_data is not None and not args.data
        screen.out(detail(shown, hidden=hidden))
    return OK


def delete_record(args: argparse.Namespace, screen: Screen) -> int:
    """`records delete KEY`: delete one record; a live IN_PROGRESS one only with `--force`."""
    now, cutoff = now_and_cutoff()
    store = store_from(args)
    if args.force and not args.yes:
        _confirm_forced(store.inspect(args.key), args.key, cutoff)
    outcome = store.delete(args.key, live_cutoff_ms=None if args.force else cutoff)
    deleted = outcome.record
    if deleted is None:
        raise CliError(f"no record with key {args.key!r}", NOT_FOUND)
    if not outcome.deleted:
        lease = deleted.in_progress_expiry_timestamp
        ends = "" if lease is None else f" (ends {relative(lease - now)})"
        raise CliError(
            f"record {args.key!r} is IN_PROGRESS with a live lease{ends}: an invocation may be "
            "running it; wait for the lease to end, or pass --force"
        )
    shown = view(RecordView.of(deleted, RECORD_FORMAT), now_ms=now, cutoff_ms=cutoff)
    if args.json:
        screen.json({"deleted": True, "record": shown})
    else:
        screen.out(f"deleted {escape_text(deleted.idempotency_key)} (was {shown['status']})")
    screen.note(LOCAL_CACHE_NOTE)
    return OK


def release_stuck(args: argparse.Namespace, screen: Screen) -> int:
    """`records release-stuck`: list stuck records (a dry run), or delete them with `--yes`.

    Each delete is fenced on what the scan saw (see `DynamoDBPersistenceLayer.release_if_stuck`).
    A record with an invalid timestamp is shown, and left alone.
    """
    store = store_from(args)
    now, cutoff = now_and_cutoff()
    scan = _Scan(store, args, screen)
    table = Rows(screen, LIST_HEADERS, cut=KEY_FIRST, middle=0)
    counts = {"released": 0, "changed": 0, "invalid": 0}
    for records in scan.pages():
        views = [
            (r, view(RecordView.of(r, RECORD_FORMAT), now_ms=now, cutoff_ms=cutoff))
            for r in records
            if is_stuck(r, cutoff)
        ]
        scan.matched += len(views)
        if not args.yes and not args.json:
            table.add([row(shown) for _, shown in views])
        for record, shown in views:
            released = False
            if shown["invalid"]:
                counts["invalid"] += 1
                outcome = f"left alone ({shown['invalid']}):"
            elif args.yes:
                released = store.release_if_stuck(record, cutoff_ms=cutoff)
                counts["released" if released else "changed"] += 1
                outcome = "released" if released else "left alone (changed since it was read):"
            if args.json:
                screen.json({**shown, "dry_run": not args.yes, "released": released})
            elif args.yes:
                screen.out(f"{outcome} {escape_text(record.idempotency_key)}")
    scan.summary(table)
    if counts["invalid"]:
        screen.note(
            f"{counts['invalid']} stuck record(s) with an invalid timestamp left alone: "
            "inspect with records get, remove with records delete"
        )
    if args.yes:
        screen.note(f"released {counts['released']}, left alone {counts['changed']}")
    else:
        stuck = scan.matched - counts["invalid"]
        screen.note(
            f"dry run: {stuck} stuck record{'' if stuck == 1 else 's'} would be released; "
            "run again with --yes to release them"
        )
    return OK


def create_table(args: argparse.Namespace, screen: Screen) -> int:
    """`create-table`: create the table (an existing one is kept) and print its layout."""
    client = client_from(args)
    created = _operator.create_idempotency_table(
        client,
        table_name=args.table,
        key_attr=args.key_attr,
        sort_key_attr=args.sort_key_attr,
        expiry_attr=args.expiry_attr,
        wait=not args.no_wait,
        outbox=args.outbox,
    )
    summary = {
        "table": args.table,
        "created": created,
        **_operator.describe_idempotency_table(client, args.table),
    }
    if args.json:
        screen.json(summary)
    else:
        sort = f", sort key {summary['sort_key']}" if summary["sort_key"] else ""
        ttl = f"TTL on {summary['ttl_attribute']}" if summary["ttl_attribute"] else "TTL off"
        screen.out(
            escape_text(
                f"table {args.table} {'created' if created else 'already exists, kept as it is'}:"
                f" partition key {summary['partition_key']}{sort}, {ttl}"
            )
        )
    if (summary["partition_key"], summary["sort_key"]) != (args.key_attr, args.sort_key_attr):
        screen.note(
            "warning: the existing table's key schema differs from the requested "
            f"{args.key_attr}/{args.sort_key_attr or '-'}"
        )
    return OK


class _Scan:
    """A read of the table under `--prefix`, page by page, with its progress line and summary."""

    def __init__(self, store: DynamoDBPersistenceLayer, args: argparse.Namespace, screen: Screen):
        self._store, self._args, self._screen = store, args, screen
        self.pages_read = self.scanned = self.skipped = self.outbox = self.matched = 0
        self._started = time.monotonic()

    def pages(self) -> Iterator[tuple[IdempotencyRecord, ...]]:
        """Yield the records of each page; the progress line shows after each."""
        for page in self._store.scan(prefix=self._args.prefix, page_size=self._args.page_size):
            self.pages_read += 1
            self.scanned += page.scanned
            self.skipped += page.skipped
            self.outbox += page.outbox
            yield page.records
            self._screen.progress(f"scanning: {self.scanned} items read, {self.matched} match")

    def summary(self, table: Rows) -> None:
        """Say how long a paged scan took, how many items were not records, and whether keys
        were cut to fit the terminal."""
        self._screen.erase()
        if table.cut_middle:
            self._screen.note("keys cut to fit the terminal: --json or a pipe prints them whole")
        if self.pages_read > 1 and not self._args.quiet:
            elapsed = time.monotonic() - self._started
            self._screen.note(
                f"scanned {self.scanned} items in {self.pages_read} pages ({elapsed:.1f}s)"
            )
        if self.skipped:
            note = f"skipped {self.skipped} items that are not idempotency records"
            if self.outbox:
                note += f", {self.outbox} of them outbox events (see `outbox list`)"
            self._screen.note(note)


def _confirm_forced(record: IdempotencyRecord | None, key: str, cutoff: int) -> None:
    """Ask before deleting a live IN_PROGRESS record: its invocation may still be running."""
    if record is None or record.status is not Status.IN_PROGRESS or is_stuck(record, cutoff):
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
