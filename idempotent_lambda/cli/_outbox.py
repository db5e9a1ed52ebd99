"""`idempotent-lambda outbox`: list the events the publisher has not published, republish them."""

from __future__ import annotations

import argparse
import io
from typing import Any

from idempotent_lambda._clock import SYSTEM_CLOCK
from idempotent_lambda.cli._connection import client_from, other_client, store_from
from idempotent_lambda.cli._output import (
    NOT_FOUND,
    OK,
    CliError,
    Rows,
    Screen,
    escape_text,
    iso,
    relative,
)
from idempotent_lambda.exceptions import IdempotencyCorruptRecordError
from idempotent_lambda.outbox._event import event_id

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
    from idempotent_lambda.persistence.dynamodb._outbox import key_ident

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
