"""`idempotent-lambda outbox`: list the events the publisher has not published, republish one."""

from __future__ import annotations

import argparse

from idempotent_lambda._clock import SYSTEM_CLOCK
from idempotent_lambda.cli._output import NOT_FOUND, OK, CliError, Rows, Screen, iso, relative
from idempotent_lambda.cli._records import client_from, store_from

LIST_HEADERS = ("EVENT ID", "DETAIL TYPE", "SOURCE", "BUS", "EMITTED", "AGE", "PUBLISHED")


def list_events(args: argparse.Namespace, screen: Screen) -> int:
    """`outbox list`: print unpublished events (all with ``--all``), oldest first, with age."""
    now = SYSTEM_CLOCK.now_ms()
    events = sorted(
        store_from(args).outbox_scan(unpublished_only=not args.all),
        key=lambda event: event.emitted_at_ms,
    )
    rows = Rows(screen, LIST_HEADERS, cut=(1, 2, 3))  # the id stays whole, for `republish`
    for event in events:
        shown = {
            "event_id": event.event_id,
            "detail_type": event.detail_type,
            "source": event.source,
            "event_bus_name": event.event_bus_name,
            "emitted_at": iso(event.emitted_at_ms),
            "age_seconds": max(0, now - event.emitted_at_ms) // 1000,
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
                    relative(max(0, now - event.emitted_at_ms)),
                    str(shown["published_at"] or "no"),
                ]
            ]
        )
    if not args.json and not args.quiet:
        kind = "event" if args.all else "unpublished event"
        screen.note(f"{len(events)} {kind}{'' if len(events) == 1 else 's'}")
    return OK


def republish(args: argparse.Namespace, screen: Screen) -> int:
    """`outbox republish EVENT_ID`: put one event on EventBridge now, then mark it published.

    The event goes out with its id, even when it was published before: a consumer keyed on
    `event_keys.OUTBOX_EVENT` runs it once whatever the count.
    """
    from idempotent_lambda.cli._doctor import _other_client
    from idempotent_lambda.outbox._publisher import Publisher

    store = store_from(args)
    found = store.outbox_find(args.event_id)
    if found is None:
        raise CliError(f"no outbox event with id {args.event_id!r}", NOT_FOUND)
    event, key = found
    events = _other_client(args, client_from(args), "events")
    publisher = Publisher(store, events_client=events, default_bus=args.event_bus_name)
    published, errors = publisher.publish([event])
    if not published:
        raise CliError(f"EventBridge did not take event {event.event_id}: {errors}")
    store.outbox_mark_published(key, SYSTEM_CLOCK.now_ms())
    if args.json:
        screen.json({"event_id": event.event_id, "published": True})
    else:
        screen.out(f"published {event.event_id} ({event.detail_type})")
    return OK
