"""DESIGN §14's outbox: every committed event published while its item lives (moto's server).

The sweeper over the index of unpublished items, doctor's outbox checks, the CLI's outbox
commands. Where IAM must deny, `_deny_proxy` answers as the condition would (moto does not
enforce IAM).
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from idempotent_lambda._outbox_format import item_key
from idempotent_lambda.metrics import EMFMetrics
from idempotent_lambda.outbox import OUTBOX_INDEX, publish_handler, sweep_handler
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.testing import ManualClock
from tests.integration._deny_proxy import deny_proxy
from tests.integration._outbox_stack import OutboxStack, client, make_stack
from tests.integration._outbox_trust import (
    delivered,
    emitter,
    put_item,
    quiet_metrics,
    store_on,
    with_index,
)


@pytest.fixture
def stack(dynamodb_endpoint: str) -> OutboxStack:
    """A fresh `OutboxStack` whose table has the index of unpublished items."""
    return with_index(make_stack(dynamodb_endpoint))


# --- 4. Every committed event is published while its item lives, stream or no stream ---


class Requests:
    """Count the requests a DynamoDB client sends, by operation (a botocore hook)."""

    def __init__(self, ddb: Any) -> None:
        self.sent: list[str] = []
        ddb.meta.events.register("before-send.dynamodb", self._count)

    def _count(self, request: Any, **_: Any) -> None:
        self.sent.append(request.headers["X-Amz-Target"].decode().rsplit(".", 1)[-1])


@pytest.mark.parametrize("key_prefixes", [["orders"], None])
def test_events_no_stream_record_brings_are_published_by_the_sweeper(
    stack: OutboxStack, key_prefixes: list[str] | None
) -> None:
    """The stream's records are never delivered: the sweeper finds the items by age in the
    index, publishes them once, reports their age, and reads a bounded page per run."""
    clock = ManualClock()
    ddb = client("dynamodb", stack.endpoint)
    store = DynamoDBPersistenceLayer(stack.table, boto3_client=ddb, clock=clock)
    handler = emitter(store, stack)
    emitted = [handler({"order_id": f"o-{n}"}, None) for n in range(3)]
    sink = io.StringIO()
    sweep = sweep_handler(
        store,
        events_client=stack.events,
        metrics=EMFMetrics("tests", stream=sink),
        key_prefixes=key_prefixes,
        limit=10,
    )
    requests = Requests(ddb)
    assert {"found": 3, "due": 0, "failed": 0, "oldest_age_seconds": 0} == sweep(None, None)
    reads = ["Query"] * 4 if key_prefixes else ["Scan"]
    assert reads == requests.sent  # too young: left to the stream's publisher
    assert [] == stack.received()
    clock.advance(301)
    requests.sent.clear()
    assert {"found": 3, "due": 3, "failed": 0, "oldest_age_seconds": 301} == sweep(None, None)
    assert reads + ["BatchGetItem"] + ["UpdateItem"] * 3 == sorted(
        requests.sent, key=["Query", "Scan", "BatchGetItem", "UpdateItem"].index
    )
    assert sorted(emitted) == sorted(event for event, _ in delivered(stack))
    ages = [
        json.loads(line).get("OutboxOldestUnpublishedAge") for line in sink.getvalue().splitlines()
    ]
    assert [301.0] == [age for age in ages if age][-1:]
    requests.sent.clear()
    assert {"found": 0, "due": 0, "failed": 0, "oldest_age_seconds": 0} == sweep(None, None)
    assert reads == requests.sent
    assert [] == stack.received()


def test_an_event_the_stream_published_leaves_the_index(stack: OutboxStack) -> None:
    """The publisher's mark removes the item from the index: the sweeper never sends it again."""
    clock = ManualClock()
    store = store_on(stack, clock)
    emitted = emitter(store, stack)({"order_id": "o-1"}, None)
    publish_handler(store, events_client=stack.events, metrics=quiet_metrics())(
        {"Records": stack.stream_records()}, None
    )
    assert [emitted] == [event for event, _ in delivered(stack)]
    clock.advance(3600)
    sweep = sweep_handler(store, events_client=stack.events, metrics=quiet_metrics())
    assert 0 == sweep(None, None)["found"]
    assert [] == stack.received()


def test_doctor_reports_events_left_unpublished_and_republish_by_age_sends_them(
    stack: OutboxStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """An event 20 minutes old: doctor fails its backlog check; `outbox republish --older-than`
    publishes it; doctor is then content."""
    import time

    from idempotent_lambda.cli import main

    old = put_item(
        stack,
        item_key("orders#" + "ef" * 32, "00000000-0000-5000-8000-000000000002"),
        detail='{"order_id": "o-old"}',
        emitted_at=int(time.time() * 1000) - 20 * 60 * 1000,
        outbox_pending={"S": "orders#0"},
    )
    table = ["--table", stack.table, "--endpoint-url", stack.endpoint]
    assert 1 == main(["doctor", *table])
    out = capsys.readouterr().out
    assert "ok    outbox index" in out
    assert "fail  outbox backlog: 1 unpublished, the oldest" in out
    assert 0 == main(["outbox", "republish", *table, "--older-than", "900", "--json"])
    assert [{"event_id": old, "published": True}] == [
        json.loads(line) for line in capsys.readouterr().out.splitlines()
    ]
    assert [old] == [event for event, _ in delivered(stack)]
    main(["doctor", *table])
    assert "ok    outbox backlog: no unpublished event" in capsys.readouterr().out


def test_doctor_without_the_index_says_what_to_create(
    dynamodb_endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A table holding outbox items without the index: a fail with the command that adds it."""
    from idempotent_lambda.cli import main

    stack = make_stack(dynamodb_endpoint)
    emitter(store_on(stack), stack)({"order_id": "o-1"}, None)
    assert 1 == main(["doctor", "--table", stack.table, "--endpoint-url", stack.endpoint])
    out = capsys.readouterr().out
    assert f"fail  outbox index: no index {OUTBOX_INDEX}" in out
    assert "--global-secondary-index-updates" in out


# --- 7. The CLI and doctor ---


def test_doctor_reports_a_denied_probe_and_a_denied_role_read_and_goes_on(
    dynamodb_endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Scan and iam:ListRolePolicies denied (DenyProxy): each is a finding; every other check
    still runs, and doctor does not end with an error."""
    from idempotent_lambda.cli import main
    from tests.integration._deny_proxy import denies

    stack = make_stack(dynamodb_endpoint)
    role = client("iam", stack.endpoint).create_role(
        RoleName=stack.table, AssumeRolePolicyDocument="{}"
    )["Role"]["Arn"]
    with deny_proxy(stack.endpoint, denies("Scan", "ListRolePolicies")) as (endpoint, refused):
        code = main(["doctor", "--table", stack.table, "--endpoint-url", endpoint, "--role", role])
    out = capsys.readouterr().out
    assert ["Scan", "ListRolePolicies"] == refused
    assert code in (0, 1)
    assert (
        "warn  outbox probe: could not look for outbox items (AccessDeniedException on Scan)" in out
    )
    assert "warn  permissions: could not read the role's policies: AccessDenied" in out
    assert "ok    key schema" in out


def test_outbox_list_in_text_mode_exits_0_with_ages_in_the_past(
    stack: OutboxStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rows, then exit 0; AGE reads '44s', never 'in 44s'."""
    import time

    from idempotent_lambda.cli import main

    put_item(
        stack,
        item_key("orders#" + "12" * 32, "00000000-0000-5000-8000-000000000003"),
        emitted_at=int(time.time() * 1000) - 3_725_000,
    )
    assert 0 == main(["outbox", "list", "--table", stack.table, "--endpoint-url", stack.endpoint])
    captured = capsys.readouterr()
    row = captured.out.splitlines()[1]
    assert " 1h 2m " in row
    assert " in " not in row
    assert "ago" not in row
    assert "1 unpublished event" in captured.err


def test_republish_escapes_a_stored_detail_type(
    stack: OutboxStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """A detail type holding a bidi control is printed escaped (moto's EventBridge cannot take
    an ESC in a detail type; the same escaping covers both)."""
    from idempotent_lambda.cli import main

    event = put_item(
        stack,
        item_key("orders#" + "34" * 32, "00000000-0000-5000-8000-000000000004"),
        outbox_detail_type={"S": "Order\u202eCreated"},
    )
    table = ["--table", stack.table, "--endpoint-url", stack.endpoint]
    assert 0 == main(["outbox", "republish", *table, event])
    out = capsys.readouterr().out
    assert "\u202e" not in out
    assert "Order\\u202eCreated" in out


def test_in_composite_key_mode_a_prefix_is_a_partition_value(dynamodb_endpoint: str) -> None:
    """static_pk_value is what the publisher and the sweeper serve, and what the index holds."""
    stack = with_index(make_stack(dynamodb_endpoint, static_pk_value="orders-fn"))
    clock = ManualClock()
    store = DynamoDBPersistenceLayer(
        stack.table,
        boto3_client=client("dynamodb", stack.endpoint),
        key_attr="pk",
        sort_key_attr="sk",
        static_pk_value="orders-fn",
        clock=clock,
    )
    emitted = emitter(store, stack)({"order_id": "o-1"}, None)
    other = publish_handler(
        store, events_client=stack.events, metrics=quiet_metrics(), key_prefixes=["payments-fn"]
    )
    assert {"batchItemFailures": []} == other({"Records": stack.stream_records()}, None)
    assert [] == stack.received()
    clock.advance(301)
    sweep = sweep_handler(
        store, events_client=stack.events, metrics=quiet_metrics(), key_prefixes=["orders-fn"]
    )
    assert 1 == sweep(None, None)["due"]
    assert [emitted] == [event for event, _ in delivered(stack)]
