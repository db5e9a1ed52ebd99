"""The outbox in the CLI: `outbox list` and `outbox republish`, and doctor's outbox checks.

The commands list the events the publisher has not published, and put them on EventBridge
again. doctor's checks look at the stream, the index of unpublished items, and what waits in
it. A table uses the outbox when it has the index, when ``--outbox`` says so, or when a first
page of it holds an outbox item (one ``Scan``: the probe). A probe that AWS refuses is a
finding, not the end of the run: the other checks go on.
"""

from __future__ import annotations

import argparse
import io
from collections.abc import Callable, Mapping
from typing import Any

from idempotent_lambda._clock import SYSTEM_CLOCK
from idempotent_lambda._outbox_format import EMITTED_AT, OUTBOX_INDEX, PENDING, event_id
from idempotent_lambda.cli._connection import client_from, other_client, store_from
from idempotent_lambda.cli._output import (
    FAIL,
    NOT_FOUND,
    OK,
    OK_CHECK,
    WARN,
    Check,
    CliError,
    Rows,
    Screen,
    escape_text,
    iso,
    relative,
)
from idempotent_lambda.exceptions import (
    IdempotencyCorruptRecordError,
    IdempotencyPersistenceLayerError,
)

LIST_HEADERS = ("EVENT ID", "DETAIL TYPE", "SOURCE", "BUS", "EMITTED", "AGE", "PUBLISHED")


def list_events(args: argparse.Namespace, screen: Screen) -> int:
    """`outbox list`: print unpublished events (all with ``--all``), oldest first, with age."""
    now = SYSTEM_CLOCK.now_ms()
    unreadable: list[dict[str, Any]] = []
    scan = store_from(args).outbox_scan(unpublished_only=not args.all, unreadable=unreadable)
    events = sorted((event for event, _ in scan), key=lambda event: event.emitted_at_ms)
    rows = Rows(screen, LIST_HEADERS, cut=(1, 2, 3))  # the id stays whole, for `republish`
    for event in events:
        age_ms = max(0, now - event.emitted_at_ms)
        shown = {
            "event_id": event.event_id,
            "detail_type": event.detail_type,
            "source": event.source,
            "event_bus_name": event.event_bus_name,
            "emitted_at": iso(event.emitted_at_ms),
            "age_seconds": age_ms // 1000,
            "published_at": iso(event.published_at_ms),
        }
        if args.json:
            screen.json(shown)
            continue
        rows.add(
            [
                [
                    event.event_id,
                    event.detail_type,
                    event.source,
                    event.event_bus_name or "(default)",
                    str(shown["emitted_at"]),
                    relative(-age_ms).removesuffix(" ago"),
                    str(shown["published_at"] or "no"),
                ]
            ]
        )
    if not args.json:
        kind = "event" if args.all else "unpublished event"
        screen.note(f"{len(events)} {kind}{'' if len(events) == 1 else 's'}")
    for key in unreadable:  # the publisher fails their records; nothing can publish them
        screen.note(f"unreadable outbox item, event {event_id(key)}: see the publisher's log")
    return OK


def republish(args: argparse.Namespace, screen: Screen) -> int:
    """`outbox republish`: put one event (EVENT_ID), or every unpublished one older than
    ``--older-than`` seconds, on EventBridge now, then mark them published.

    One event goes out with its id even when it was published before: a consumer keyed on
    `event_keys.OUTBOX_EVENT` runs it once whatever the count. The bulk form sends only events
    still unpublished when it reads them (a consistent read just before sending).
    """
    from idempotent_lambda.metrics import EMFMetrics
    from idempotent_lambda.outbox._publisher import Publisher

    if (args.event_id is None) == (args.older_than is None):
        raise CliError("give either EVENT_ID or --older-than SECONDS")
    store = store_from(args)
    events = other_client(args, client_from(args), "events")
    publisher = Publisher(
        store,
        events_client=events,
        default_bus=args.event_bus_name,
        metrics=EMFMetrics("idempotent_lambda", stream=io.StringIO()),  # no EMF on a terminal
    )
    if args.older_than is not None:
        return _republish_older(args, screen, store, publisher)
    try:
        found = store.outbox_find(args.event_id)
    except IdempotencyCorruptRecordError as exc:
        raise CliError(f"outbox event {args.event_id!r} is unreadable: {exc}") from exc
    if found is None:
        raise CliError(f"no outbox event with id {args.event_id!r}", NOT_FOUND)
    event, key = found
    published, errors = publisher.publish([event])
    if not published:
        raise CliError(f"EventBridge did not take event {event.event_id}: {errors}")
    store.outbox_mark_published(key, SYSTEM_CLOCK.now_ms())
    if args.json:
        screen.json({"event_id": event.event_id, "published": True})
    else:
        screen.out(escape_text(f"published {event.event_id} ({event.detail_type})"))
    return OK


def _republish_older(args: argparse.Namespace, screen: Screen, store: Any, publisher: Any) -> int:
    """Publish every unpublished event older than ``--older-than`` seconds (a Scan)."""
    if args.older_than < 0:
        raise CliError("--older-than must not be negative")
    cutoff = SYSTEM_CLOCK.now_ms() - args.older_than * 1000
    found = [
        (event, key)
        for event, key in store.outbox_scan(unpublished_only=True)
        if event.emitted_at_ms <= cutoff
    ]
    found.sort(key=lambda pair: pair[0].emitted_at_ms)
    from idempotent_lambda._outbox_format import key_ident

    failed = publisher.publish_keys([key for _, key in found], None)
    for event, key in found:
        ok = key_ident(key) not in failed
        if args.json:
            screen.json({"event_id": event.event_id, "published": ok})
        elif not ok:
            screen.out(escape_text(f"failed    {event.event_id} ({event.detail_type})"))
        else:
            screen.out(escape_text(f"published {event.event_id} ({event.detail_type})"))
    if not args.json:
        screen.note(
            f"{len(found) - len(failed)} of {len(found)} unpublished events older than "
            f"{args.older_than} s published"
        )
    if failed:
        raise CliError(f"{len(failed)} events were not published (see the publisher's log)")
    return OK


# --- doctor's outbox checks ---

#: Stream views the outbox publisher works with.
OUTBOX_VIEWS = ("NEW_IMAGE", "NEW_AND_OLD_IMAGES")
#: An unpublished event older than this means neither the stream's publisher nor the sweeper
#: is publishing (the sweeper's default schedule is every 5 minutes).
STALE_SECONDS = 15 * 60
#: Index entries the backlog check reads (one page of the sparse index).
BACKLOG_PAGE = 1000
INDEX_FIX = (
    "aws dynamodb update-table --table-name <table> --attribute-definitions "
    f"AttributeName={PENDING},AttributeType=S AttributeName={EMITTED_AT},AttributeType=N "
    '--global-secondary-index-updates \'[{"Create":{"IndexName":"'
    + OUTBOX_INDEX
    + f'","KeySchema":[{{"AttributeName":"{PENDING}","KeyType":"HASH"}},'
    f'{{"AttributeName":"{EMITTED_AT}","KeyType":"RANGE"}}],'
    '"Projection":{"ProjectionType":"KEYS_ONLY"}}}]\' '
    "(the sample stack and the CDK construct create it), then schedule outbox.sweep_handler"
)


def outbox_checks(args: argparse.Namespace, table: Mapping[str, Any]) -> list[Check]:
    """Return the outbox findings for ``table`` (none when it does not use the outbox)."""
    index = next(
        (
            i
            for i in table.get("GlobalSecondaryIndexes") or []
            if i.get("IndexName") == OUTBOX_INDEX
        ),
        None,
    )
    store = store_from(args)
    probe: list[Check] = []
    seen: list[bool] = []

    def has_outbox() -> bool:
        if not seen:
            seen.append(index is not None or _probe(store, probe))
        return seen[0]

    found = stream(table, asked=args.outbox, has_outbox=has_outbox)
    used = args.outbox or has_outbox()
    checks = [*probe, *([found] if found is not None else [])]
    if not used:
        return checks
    checks.append(index_check(index))
    if index is not None:
        checks.append(_backlog(store))
    return checks


def stream(
    table: Mapping[str, Any], *, asked: bool, has_outbox: Callable[[], bool]
) -> Check | None:
    """The table's stream carries outbox items to `outbox.publish_handler`.

    Checked when ``asked`` (``--outbox``) or when the table holds outbox items (``has_outbox``
    is only called when the stream does not suffice); None: not checked.
    """
    spec = table.get("StreamSpecification") or {}
    view = spec.get("StreamViewType")
    enable = (
        "aws dynamodb update-table --table-name <table> --stream-specification "
        "StreamEnabled=true,StreamViewType=NEW_IMAGE"
    )
    then = ", then point publish_handler's event source mapping at the new stream"
    if spec.get("StreamEnabled") and view in OUTBOX_VIEWS:
        return Check("outbox stream", OK_CHECK, f"stream enabled ({view})")
    if not asked and not has_outbox():
        return None
    if not spec.get("StreamEnabled"):
        return Check(
            "outbox stream", FAIL, "no stream: outbox events are never published", enable + then
        )
    return Check(
        "outbox stream",
        FAIL,
        f"the stream's view is {view}; the publisher's filter reads NEW_IMAGE",
        "a stream's view cannot change: disable the stream (StreamEnabled=false), then "
        + enable
        + then,
    )


def index_check(index: Mapping[str, Any] | None) -> Check:
    """The sparse index of unpublished items exists, keyed as the sweeper reads it."""
    if index is None:
        return Check(
            "outbox index",
            FAIL,
            f"no index {OUTBOX_INDEX}: an event whose stream record is lost (a stream off, a "
            "mapping stuck for 24 hours) is never published",
            INDEX_FIX,
        )
    keys = {k.get("KeyType"): k.get("AttributeName") for k in index.get("KeySchema", [])}
    if keys != {"HASH": PENDING, "RANGE": EMITTED_AT}:
        return Check(
            "outbox index",
            FAIL,
            f"{OUTBOX_INDEX} is not keyed {PENDING} (hash), {EMITTED_AT} (range)",
            "delete the index and create it again: " + INDEX_FIX,
        )
    status = index.get("IndexStatus", "ACTIVE")
    if status != "ACTIVE":
        return Check("outbox index", WARN, f"{OUTBOX_INDEX} is {status}")
    return Check("outbox index", OK_CHECK, f"{OUTBOX_INDEX} ({PENDING}, {EMITTED_AT})")


def backlog(ages_s: list[int], *, full: bool) -> Check:
    """No unpublished event is older than `STALE_SECONDS`."""
    if not ages_s:
        return Check("outbox backlog", OK_CHECK, "no unpublished event")
    count = f"{len(ages_s)}{'+' if full else ''} unpublished"
    oldest = max(ages_s)
    if oldest <= STALE_SECONDS:
        return Check("outbox backlog", OK_CHECK, f"{count}, the oldest {oldest} s old")
    return Check(
        "outbox backlog",
        FAIL,
        f"{count}, the oldest {oldest} s old: neither the stream's publisher nor the sweeper "
        "publishes them",
        "check the publisher's event source mapping and the sweeper's schedule and logs; "
        f"`idempotent-lambda outbox republish --table <table> --older-than {STALE_SECONDS}` "
        "publishes them now",
    )


def _probe(store: Any, findings: list[Check]) -> bool:
    """Tell whether a first page of the table holds an outbox item; a refusal is a finding."""
    try:
        return bool(store.outbox_probe())
    except IdempotencyPersistenceLayerError as exc:
        findings.append(
            Check(
                "outbox probe",
                WARN,
                f"could not look for outbox items ({_cause(exc)} on Scan): the outbox checks "
                "ran as if the table does not use it",
                "allow dynamodb:Scan on the table to doctor's role, or pass --outbox",
            )
        )
        return False


def _backlog(store: Any) -> Check:
    try:
        found = store.outbox_pending_keys(OUTBOX_INDEX, None, BACKLOG_PAGE)
    except IdempotencyPersistenceLayerError as exc:
        return Check(
            "outbox backlog",
            WARN,
            f"could not read {OUTBOX_INDEX} ({_cause(exc)} on Scan)",
            "allow dynamodb:Scan on the index to doctor's role",
        )
    now_ms = store.clock.now_ms()
    ages = [max(0, now_ms - emitted) // 1000 for _, emitted in found]
    return backlog(ages, full=len(found) >= BACKLOG_PAGE)


def _cause(error: IdempotencyPersistenceLayerError) -> str:
    return error.error_code or type(error.__cause__ or error).__name__
