"""doctor's outbox checks: the stream, the index of unpublished items, and what waits in it.

A table uses the outbox when it has the index, when ``--outbox`` says so, or when a first page
of it holds an outbox item (one ``Scan``: the probe). A probe that AWS refuses is a finding,
not the end of the run: the other checks go on.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import Any

from idempotent_lambda.cli._output import FAIL, WARN, Check
from idempotent_lambda.cli._output import OK_CHECK as OK
from idempotent_lambda.exceptions import IdempotencyPersistenceLayerError
from idempotent_lambda.outbox._event import EMITTED_AT, OUTBOX_INDEX, PENDING

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
    from idempotent_lambda.cli._connection import store_from

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
        return Check("outbox stream", OK, f"stream enabled ({view})")
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
    return Check("outbox index", OK, f"{OUTBOX_INDEX} ({PENDING}, {EMITTED_AT})")


def backlog(ages_s: list[int], *, full: bool) -> Check:
    """No unpublished event is older than `STALE_SECONDS`."""
    if not ages_s:
        return Check("outbox backlog", OK, "no unpublished event")
    count = f"{len(ages_s)}{'+' if full else ''} unpublished"
    oldest = max(ages_s)
    if oldest <= STALE_SECONDS:
        return Check("outbox backlog", OK, f"{count}, the oldest {oldest} s old")
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
