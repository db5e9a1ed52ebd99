"""DESIGN §14's outbox: no event forged, lost, or held back by another's item (moto's server).

The real parts: moto's table and its stream (GetRecords), EventBridge with a rule targeting an
SQS queue, SQS. Where IAM must deny, `_deny_proxy` answers as the condition would (moto does
not enforce IAM).
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from idempotent_lambda import IdempotencyConfig, idempotent
from idempotent_lambda.metrics import EMFMetrics
from idempotent_lambda.outbox import OUTBOX_INDEX, emit, publish_handler, sweep_handler
from idempotent_lambda.outbox._event import OutboxEvent, event_id, item_key
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.testing import ManualClock
from tests.integration._deny_proxy import deny_proxy, leading_keys
from tests.integration._outbox_stack import SOURCE, OutboxStack, client, make_stack


def with_index(stack: OutboxStack) -> OutboxStack:
    """Give the stack's table the sparse index of unpublished items (as the sample stack does)."""
    ddb = client("dynamodb", stack.endpoint)
    keys = ddb.describe_table(TableName=stack.table)["Table"]["AttributeDefinitions"]
    ddb.update_table(  # the key attributes again: moto replaces the definitions it is given
        TableName=stack.table,
        AttributeDefinitions=[
            *keys,
            {"AttributeName": "outbox_pending", "AttributeType": "S"},
            {"AttributeName": "outbox_emitted_at", "AttributeType": "N"},
        ],
        GlobalSecondaryIndexUpdates=[
            {
                "Create": {
                    "IndexName": OUTBOX_INDEX,
                    "KeySchema": [
                        {"AttributeName": "outbox_pending", "KeyType": "HASH"},
                        {"AttributeName": "outbox_emitted_at", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                }
            }
        ],
    )
    return stack


@pytest.fixture
def stack(dynamodb_endpoint: str) -> OutboxStack:
    return with_index(make_stack(dynamodb_endpoint))


def store_on(stack: OutboxStack, clock: ManualClock | None = None, **kwargs: Any) -> Any:
    """A store of the stack's table (its own clock when given)."""
    extra: dict[str, Any] = {} if clock is None else {"clock": clock}
    return DynamoDBPersistenceLayer(
        stack.table, boto3_client=client("dynamodb", stack.endpoint), **extra, **kwargs
    )


def emitter(store: Any, stack: OutboxStack, *, prefix: str = "orders", expires: int = 3600) -> Any:
    config = IdempotencyConfig(event_key_jmespath="order_id", expires_after_seconds=expires)

    @idempotent(persistence_store=store, config=config, key_prefix=prefix)
    def handler(event: dict[str, Any], context: Any) -> str:
        return emit(
            "OrderCreated", {"order_id": event["order_id"]}, source=SOURCE, event_bus_name=stack.bus
        )

    return handler


def quiet_metrics() -> EMFMetrics:
    return EMFMetrics("tests", stream=io.StringIO())


def delivered(stack: OutboxStack) -> list[tuple[str, dict[str, Any]]]:
    """The events on the consumer's queue: (outbox id, detail without it)."""
    found = []
    for message in stack.received():
        detail = json.loads(message["Body"])["detail"]
        found.append((detail.pop("outbox")["id"], detail))
    return sorted(found, key=lambda pair: pair[1].get("order_id", ""))


def put_item(stack: OutboxStack, key: str, *, outbox_id: str | None = None, **attrs: Any) -> str:
    """Write an outbox item at ``key`` directly (a writer of the table); return its true id."""
    true_id = event_id({"id": {"S": key}})
    item = {
        "id": {"S": key},
        "outbox_id": {"S": outbox_id or true_id},
        "outbox_detail_type": {"S": "OrderCreated"},
        "outbox_detail": {"S": attrs.pop("detail", '{"order_id": "forged"}')},
        "outbox_source": {"S": SOURCE},
        "outbox_event_bus": {"S": stack.bus},
        "outbox_emitted_at": {"N": str(attrs.pop("emitted_at", 1_700_000_000_000))},
        **attrs,
    }
    client("dynamodb", stack.endpoint).put_item(TableName=stack.table, Item=item)
    return true_id


# --- 1. The id belongs to the claim: a rerun after expiry emits new events, and they go out ---


def test_a_body_run_again_after_its_record_expired_emits_new_events_that_are_published(
    stack: OutboxStack,
) -> None:
    """The rerun writes new items (INSERTs): the publisher publishes them; the first stays
    marked published."""
    clock = ManualClock()
    store = store_on(stack, clock)
    handler = emitter(store, stack, expires=60)
    publish = publish_handler(store, events_client=stack.events, metrics=quiet_metrics())
    first = handler({"order_id": "o-1"}, None)
    assert {"batchItemFailures": []} == publish({"Records": stack.stream_records()}, None)
    clock.advance(61)
    second = handler({"order_id": "o-1"}, None)
    records = stack.stream_records()
    written = [  # the rerun's write (the other record is the first item's mark)
        r["eventName"]
        for r in records
        if "outbox_id" in r["dynamodb"].get("NewImage", {})
        and "outbox_published_at" not in r["dynamodb"]["NewImage"]
    ]
    assert ["INSERT"] == written
    assert {"batchItemFailures": []} == publish({"Records": records}, None)
    assert first != second
    assert [first, second] == [event for event, _ in delivered(stack)]
    items = stack.outbox_items()
    assert 2 == len(items)
    assert all("outbox_published_at" in item for item in items)


# --- 2. An id only from its own item; only the prefixes served ---


def test_an_item_claiming_another_s_id_neither_publishes_nor_shadows_it(stack: OutboxStack) -> None:
    """A writer under another prefix stores an item with a real event's id: the real event goes
    out with it, the forged item fails its own record and never carries the id."""
    store = store_on(stack)
    real = emitter(store, stack)({"order_id": "o-1"}, None)
    forged_key = item_key("other#" + "ab" * 32, "00000000-0000-5000-8000-000000000000")
    put_item(stack, forged_key, outbox_id=real)
    publish = publish_handler(store, events_client=stack.events, metrics=quiet_metrics())
    records = [r for r in stack.stream_records() if r["eventName"] == "INSERT"]
    answer = publish({"Records": records}, None)
    assert [(real, {"order_id": "o-1"})] == delivered(stack)
    forged_seq = next(
        r["dynamodb"]["SequenceNumber"]
        for r in records
        if r["dynamodb"]["Keys"]["id"]["S"] == forged_key
    )
    assert forged_seq in {f["itemIdentifier"] for f in answer["batchItemFailures"]}


def test_a_publisher_serves_only_its_key_prefixes(stack: OutboxStack) -> None:
    """Another prefix's item is done at once: not published, not failed."""
    store = store_on(stack)
    ours = emitter(store, stack, prefix="orders")({"order_id": "o-1"}, None)
    emitter(store, stack, prefix="payments")({"order_id": "o-2"}, None)
    publish = publish_handler(
        store, events_client=stack.events, metrics=quiet_metrics(), key_prefixes=["orders"]
    )
    assert {"batchItemFailures": []} == publish({"Records": stack.stream_records()}, None)
    assert [ours] == [event for event, _ in delivered(stack)]
    published = [i for i in stack.outbox_items() if "outbox_published_at" in i]
    assert [["orders"]] == [[i["id"]["S"].split("#")[0]] for i in published]


# --- 3. An item that cannot be read, parsed or sent fails its own record only ---


def test_an_item_the_publisher_may_not_read_fails_alone(stack: OutboxStack) -> None:
    """IAM (LeadingKeys orders#*, answered by DenyProxy) refuses one item of the batch: the
    others are published, and only that record (with those after it) is reported."""
    handler = emitter(store_on(stack), stack, prefix="payments")
    denied = handler({"order_id": "o-0"}, None)
    orders = emitter(store_on(stack), stack, prefix="orders")
    allowed = [orders({"order_id": f"o-{n}"}, None) for n in (1, 2)]
    records = stack.stream_records()
    with deny_proxy(stack.endpoint, leading_keys("id", ["orders#*"])) as (endpoint, refused):
        store = DynamoDBPersistenceLayer(stack.table, boto3_client=client("dynamodb", endpoint))
        publish = publish_handler(store, events_client=stack.events, metrics=quiet_metrics())
        answer = publish({"Records": records}, None)
    assert "BatchGetItem" in refused
    assert allowed == [event for event, _ in delivered(stack)]
    reported = {f["itemIdentifier"] for f in answer["batchItemFailures"]}
    denied_seq = next(
        r["dynamodb"]["SequenceNumber"]
        for r in records
        if r["dynamodb"].get("NewImage", {}).get("outbox_id", {}).get("S") == denied
    )
    assert denied_seq in reported


@pytest.mark.parametrize(
    "broken",
    [
        {"emitted_at": 10**20},
        {"emitted_at": -5},
        {"detail": "[" * 5000 + "]" * 5000},
        {"detail": '{"a":' * 5000 + "1" + "}" * 5000},
        {"outbox_traceparent": {"N": "1"}},
    ],
)
def test_an_item_that_cannot_be_parsed_fails_alone_and_the_cli_shows_no_traceback(
    stack: OutboxStack, broken: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Out-of-range emit time, a detail nested 5,000 deep: that record fails, the rest go out;
    `outbox list` exits 0 and `outbox republish` answers with an error, never a traceback."""
    from idempotent_lambda.cli import main

    store = store_on(stack)
    bad_id = put_item(
        stack, item_key("orders#" + "cd" * 32, "00000000-0000-5000-8000-000000000001"), **broken
    )
    good = emitter(store, stack)({"order_id": "o-1"}, None)
    publish = publish_handler(store, events_client=stack.events, metrics=quiet_metrics())
    answer = publish({"Records": stack.stream_records()}, None)
    assert [good] == [event for event, _ in delivered(stack)]
    assert 1 <= len(answer["batchItemFailures"])
    table = ["--table", stack.table, "--endpoint-url", stack.endpoint]
    capsys.readouterr()
    assert 0 == main(["outbox", "list", *table])
    assert f"unreadable outbox item, event {bad_id}" in capsys.readouterr().err
    assert 2 == main(["outbox", "republish", *table, bad_id])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out


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


# --- 8. An untraced publisher passes on only a valid traceparent ---


@pytest.mark.no_tracer_provider
@pytest.mark.parametrize(
    ("stored", "sent"),
    [
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",) * 2,
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\x1b[2J", None),
        ("00-" + "a" * 5000, None),
        ("not a traceparent", None),
    ],
)
def test_a_publisher_without_tracing_passes_on_only_a_w3c_traceparent(
    stack: OutboxStack, stored: str, sent: str | None
) -> None:
    """Control characters, kilobytes or another format: the event goes out without it."""
    store = store_on(stack)
    put_item(
        stack,
        item_key("orders#" + "56" * 32, "00000000-0000-5000-8000-000000000005"),
        outbox_traceparent={"S": stored},
    )
    publish = publish_handler(store, events_client=stack.events, metrics=quiet_metrics())
    assert {"batchItemFailures": []} == publish({"Records": stack.stream_records()}, None)
    ((message,),) = [stack.received()]
    assert sent == json.loads(message["Body"])["detail"]["outbox"].get("traceparent")


def test_an_event_that_cannot_become_an_entry_fails_alone_and_every_span_ends(
    stack: OutboxStack, traces: Any
) -> None:
    """An entry that cannot be built (an emit time no datetime holds) fails with its own error
    code; the other event goes out; both publication spans end, the failed one in error."""
    from opentelemetry.trace import StatusCode

    from idempotent_lambda.outbox._publisher import Publisher

    publisher = Publisher(store_on(stack), events_client=stack.events, metrics=quiet_metrics())
    good = OutboxEvent("1" * 36, "Good", "{}", SOURCE, stack.bus, 1_700_000_000_000)
    bad = OutboxEvent("2" * 36, "Bad", "{}", SOURCE, stack.bus, 10**20)
    published, errors = publisher.publish([good, bad])
    assert [good] == published
    assert ["InvalidEntry:"] == [code[: len("InvalidEntry:")] for code in errors.values()]
    assert StatusCode.UNSET == traces.named("outbox publish Good").status.status_code
    assert StatusCode.ERROR == traces.named("outbox publish Bad").status.status_code
    assert 1 == len(stack.received())


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
