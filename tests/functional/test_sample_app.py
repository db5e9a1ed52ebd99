"""The sample order service end to end, on a moto server: the demo's scenario and more."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from samples.answers import expect_duplicates, explain_answers
from samples.app.orders import order_id_for
from samples.demo import main
from samples.local_app import CALLER, OTHER_CALLER, LocalApp, Response, order_body
from samples.local_stack import (
    bucket_configuration_requests,
    bucket_definitions,
    function_environment,
    load_template,
    parameter_defaults,
    resources_of,
    table_definitions,
)
from samples.scenario import run_scenario, step_create_orders, step_payments, step_projection
from samples.watchers import Transcript

ROOT = Path(__file__).resolve().parents[2]

# Powertools warns when an invocation flushes no metric (a request refused before any decision
# was counted); expected for the scenario's 400s.
pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")


def transcript() -> tuple[Transcript, list[str]]:
    lines: list[str] = []
    return Transcript(out=lines.append), lines


def test_demo_scenario_passes_every_check(app: LocalApp) -> None:
    """The whole narrated scenario of `make demo` passes all of its checks."""
    t, lines = transcript()
    run_scenario(app, t)
    assert [] == t.failures, "\n".join(lines)
    assert t.checks >= 30


def test_steps_pass_on_their_own(app: LocalApp) -> None:
    """Each step's checks pass when the steps are driven one by one."""
    t, lines = transcript()
    orders = step_create_orders(app, t)
    assert [] == t.failures, "\n".join(lines)
    step_payments(app, t, orders)
    assert [] == t.failures, "\n".join(lines)
    step_projection(app, t, orders)
    assert [] == t.failures, "\n".join(lines)


def test_order_id_is_derived_from_the_idempotency_key(app: LocalApp) -> None:
    """The order id is a function of the key, so every retry names the same order."""
    key = f"key-{app.run_id}"
    response = app.post_order(order_body(f"carol-{app.run_id}", ("BOOK-1", 1, "9.99")), key)
    assert 201 == response.status
    assert order_id_for(key, CALLER) == response.body["order_id"]
    assert f"/orders/{response.body['order_id']}" == response.headers["location"]


def test_retry_after_the_idempotency_record_expired_creates_no_second_order(
    app: LocalApp,
) -> None:
    """With the record gone, a retry ran again, but its conditional put cancelled the commit."""
    customer = f"dave-{app.run_id}"
    body = order_body(customer, ("PEN-7", 3, "3.20"))
    key = f"key-{app.run_id}"
    first = app.post_order(body, key)
    table = app.tables["IdempotencyTable"]
    for item in app.dynamodb.scan(TableName=table)["Items"]:  # the record "expires"
        app.dynamodb.delete_item(TableName=table, Key={"id": item["id"]})
    runs = app.executions("CreateOrderFunction")

    retry = app.post_order(body, key)

    assert 201 == first.status
    assert (409, "Conflict") == (retry.status, retry.body["title"])
    assert "application/problem+json" == retry.headers["content-type"]
    assert str(first.body["order_id"]) not in json.dumps(retry.body)  # nothing leaks
    assert 1 == app.executions("CreateOrderFunction") - runs  # it ran: the record was gone
    assert [first.body["order_id"]] == [o["order_id"] for o in app.orders_of(customer)]
    assert [] == app.dynamodb.scan(TableName=table)["Items"]  # the 409 is not stored
    assert 409 == app.post_order(body, key).status  # so a retry runs, and conflicts, again


def test_the_order_its_event_and_its_record_commit_in_one_transaction(app: LocalApp) -> None:
    """CreateOrder's first call: a claim, then one TransactWriteItems with the order, its
    OrderCreated outbox item and the record."""
    orders, records = app.tables["OrdersTable"], app.tables["IdempotencyTable"]
    sent = len(app.requests.transactions)

    created = app.post_order(order_body(f"gina-{app.run_id}", ("MUG-3", 1, "8.00")), app.run_id)

    assert 201 == created.status
    (writes,) = app.requests.transactions[sent:]
    put_order, put_event, put_record = (write["Put"] for write in writes)
    assert (orders, "attribute_not_exists(order_id)") == (
        put_order["TableName"],
        put_order["ConditionExpression"],
    )
    assert created.body["order_id"] == put_order["Item"]["order_id"]["S"]
    assert (records, "COMPLETED") == (put_record["TableName"], put_record["Item"]["status"]["S"])
    assert records == put_event["TableName"]
    # under the record's key: CreateOrder's own IAM key prefix covers it
    assert put_event["Item"]["id"]["S"].startswith(put_record["Item"]["id"]["S"] + "#outbox#")
    assert "OrderCreated" == put_event["Item"]["outbox_detail_type"]["S"]
    assert created.body == json.loads(put_event["Item"]["outbox_detail"]["S"])


def test_a_failed_commit_leaves_neither_order_nor_record(app: LocalApp) -> None:
    """An order that cannot be written (its id taken) is not created, and no 201 is stored."""
    customer = f"hank-{app.run_id}"
    key = f"taken-{app.run_id}"
    order_id = order_id_for(key, CALLER)
    app.dynamodb.put_item(
        TableName=app.tables["OrdersTable"],
        Item={"order_id": {"S": order_id}, "customer_id": {"S": "someone-else"}},
    )

    records_before = _record_ids(app)

    response = app.post_order(order_body(customer, ("BOOK-1", 1, "9.99")), key)

    assert 409 == response.status
    assert [] == app.orders_of(customer)
    assert records_before == _record_ids(app)  # its record was released, not completed


def _record_ids(app: LocalApp) -> set[str]:
    table = app.tables["IdempotencyTable"]
    return {item["id"]["S"] for item in app.dynamodb.scan(TableName=table)["Items"]}


def test_payment_of_a_wrong_amount_is_reported_failed(app: LocalApp) -> None:
    """A payment whose amount does not match the order fails that one message only."""
    from samples.local_lambda import queue_arn, sqs_event, sqs_message

    order = app.post_order(order_body(f"erin-{app.run_id}", ("MUG-3", 1, "8.00")), app.run_id)
    order_id = order.body["order_id"]
    good = sqs_message(
        {"payment_id": f"p-{app.run_id}", "order_id": order_id, "amount": "8.00"},
        queue_arn=queue_arn("PaymentsQueue"),
    )
    wrong = sqs_message(
        {"payment_id": f"q-{app.run_id}", "order_id": order_id, "amount": "7.00"},
        queue_arn=queue_arn("PaymentsQueue"),
    )

    result = app.call("ProcessPaymentFunction", sqs_event([wrong, good]))

    assert {"batchItemFailures": [{"itemIdentifier": wrong["messageId"]}]} == result
    assert "PAID" == (app.order(order_id) or {})["status"]


def test_tables_the_demo_creates_match_template(app: LocalApp) -> None:
    """Every table of template.yaml exists locally with the template's keys, stream, SSE, TTL."""
    definitions = table_definitions(load_template())
    assert set(definitions) == set(app.tables)
    for logical_id, properties in definitions.items():
        name = app.tables[logical_id]
        table = app.dynamodb.describe_table(TableName=name)["Table"]
        assert properties["KeySchema"] == table["KeySchema"], logical_id
        assert sorted(properties["AttributeDefinitions"], key=str) == sorted(
            table["AttributeDefinitions"], key=str
        )
        assert properties["BillingMode"] == table["BillingModeSummary"]["BillingMode"]
        stream = properties.get("StreamSpecification")
        if stream:
            assert {"StreamEnabled": True, "StreamViewType": stream["StreamViewType"]} == (
                table["StreamSpecification"]
            )
        else:
            assert not table.get("StreamSpecification", {}).get("StreamEnabled", False)
        if properties.get("SSESpecification", {}).get("SSEEnabled"):
            assert "ENABLED" == table["SSEDescription"]["Status"]
        ttl = properties.get("TimeToLiveSpecification")
        described = app.dynamodb.describe_time_to_live(TableName=name)
        if ttl:
            assert {"TimeToLiveStatus": "ENABLED", "AttributeName": ttl["AttributeName"]} == (
                described["TimeToLiveDescription"]
            )


def test_function_environment_comes_from_template(app: LocalApp) -> None:
    """The handlers get the template's Globals environment, each Ref resolved locally.

    A Ref to a table or bucket names the local one; a Ref to a parameter is its default; a
    literal stays as written.
    """
    template = load_template()
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    resolved = {**app.tables, **app.buckets, **app.buses, **parameter_defaults(template)}
    expected = {
        name: resolved[value["Ref"]] if isinstance(value, dict) else str(value)
        for name, value in variables.items()
    }
    assert expected == {name: app.environment[name] for name in variables}
    assert app.buckets["LargeResultsBucket"] == app.environment["LARGE_RESULTS_BUCKET"]
    assert "1" == app.environment["IDEMPOTENCY_EXPIRY_DAYS"]
    assert "orders" == app.environment["POWERTOOLS_SERVICE_NAME"]


def test_without_an_s3_endpoint_the_bucket_variable_is_left_unset() -> None:
    """``--endpoint-url`` without an S3 endpoint: no bucket, so no LARGE_RESULTS_BUCKET."""
    template = load_template()
    named = [*table_definitions(template), *resources_of(template, "AWS::Events::EventBus")]
    names = {logical_id: logical_id.lower() for logical_id in named}

    environment = function_environment(
        template, names, omitted=frozenset(bucket_definitions(template))
    )

    assert "LARGE_RESULTS_BUCKET" not in environment
    assert {"IDEMPOTENCY_TABLE", "IDEMPOTENCY_EXPIRY_DAYS"} <= set(environment)


def test_bucket_properties_the_local_stack_does_not_know_are_refused() -> None:
    """Nothing is silently dropped: an unknown bucket property or rule field is an error."""
    with pytest.raises(ValueError, match="VersioningConfiguration"):
        bucket_configuration_requests({"VersioningConfiguration": {"Status": "Enabled"}}, {})
    rule = {"Status": "Enabled", "Transitions": []}
    with pytest.raises(ValueError, match="Transitions"):
        bucket_configuration_requests({"LifecycleConfiguration": {"Rules": [rule]}}, {})


def test_bucket_the_demo_creates_matches_template(app: LocalApp) -> None:
    """The bucket of template.yaml exists locally encrypted, private, with its lifecycle rule."""
    template = load_template()
    (properties,) = bucket_definitions(template).values()
    bucket = app.buckets["LargeResultsBucket"]
    days = int(parameter_defaults(template)["IdempotencyExpiryDays"])

    encryption = app.s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]
    block = app.s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
    ownership = app.s3.get_bucket_ownership_controls(Bucket=bucket)["OwnershipControls"]
    (rule,) = app.s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]

    (sse,) = properties["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert (
        sse["ServerSideEncryptionByDefault"]
        == (encryption["Rules"][0]["ApplyServerSideEncryptionByDefault"])
    )
    assert properties["PublicAccessBlockConfiguration"] == block
    assert properties["OwnershipControls"] == ownership
    assert {
        "ID": "ExpireIdempotencyResults",
        "Status": "Enabled",
        "Filter": {"Prefix": "idempotency/"},
        "Expiration": {"Days": days},
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
    } == rule


def test_a_large_result_is_offloaded_to_the_bucket_and_replayed(app: LocalApp) -> None:
    """A result too large for an item goes to the template's bucket; the retry reads it back.

    The function uses the store the sample's handlers use (`samples.app.aws`), so this is the
    deployed wiring: LARGE_RESULTS_BUCKET from the template, objects under
    ``idempotency/<key_prefix>/`` (the prefix its IAM grants). First call: 2 requests on the
    idempotency table and 1 PutObject; retry: 1 and 1 GetObject.
    """
    from idempotent_lambda import IdempotencyConfig, idempotent_function
    from samples.app.aws import idempotency_store, record_expiry_seconds

    bucket, table = app.buckets["LargeResultsBucket"], app.tables["IdempotencyTable"]
    runs: list[dict[str, Any]] = []
    prefix = f"orders.export.{app.run_id}"

    @idempotent_function(
        data_keyword_argument="request",
        persistence_store=idempotency_store(prefix),
        config=IdempotencyConfig(
            record_format="native", expires_after_seconds=record_expiry_seconds()
        ),  # as the sample's handlers (samples.app.observability): offloading is native
        key_prefix=prefix,
    )
    def export(request: dict[str, Any]) -> str:
        runs.append(request)
        return base64.b64encode(os.urandom(600_000)).decode()  # ~600 KB even compressed

    request = {"customer_id": f"ivy-{app.run_id}"}
    before_s3, before_table = app.requests.for_table(bucket), app.requests.for_table(table)

    first = export(request=request)
    after_first_s3, after_first_table = (
        app.requests.for_table(bucket),
        app.requests.for_table(table),
    )
    again = export(request=request)

    assert first == again
    assert 1 == len(runs)
    objects = app.s3.list_objects_v2(Bucket=bucket, Prefix="idempotency/")["Contents"]
    (stored,) = [o for o in objects if prefix in o["Key"]]
    assert stored["Key"].startswith(f"idempotency/{prefix}/{prefix}%23")
    (item,) = [
        i
        for i in app.dynamodb.scan(TableName=table)["Items"]
        if i["id"]["S"].startswith(f"orders.export.{app.run_id}")
    ]
    reference = json.loads(item["data"]["S"])["$s3"]
    assert (bucket, stored["Key"], stored["Size"]) == (
        reference["bucket"],
        reference["key"],
        reference["size"],
    )
    assert {"PutObject": 1} == after_first_s3 - before_s3
    assert {"GetObject": 1} == app.requests.for_table(bucket) - after_first_s3
    assert 2 == sum((after_first_table - before_table).values())
    assert 1 == sum((app.requests.for_table(table) - after_first_table).values())
    assert ["CLAIMED", "REPLAYED"] == [
        d["outcome"]
        for d in app.decisions.decisions
        if str(d.get("key", "")).startswith(f"orders.export.{app.run_id}")
    ]


@pytest.mark.parametrize(
    ("handler", "event", "expected"),
    [
        ("create_order", "create_order.json", '"statusCode": 201'),
        ("project_orders", "project_orders.json", '"batchItemFailures": []'),
        ("reserve_stock", "reserve_stock.json", '"batchItemFailures": []'),
    ],
)
def test_single_handler_mode_invokes_a_handler_with_an_event_file(
    app: LocalApp,
    capsys: pytest.CaptureFixture[str],
    handler: str,
    event: str,
    expected: str,
) -> None:
    """``python -m samples.demo --handler ... --event ... --times 2`` prints two responses."""
    endpoint = app.environment["AWS_ENDPOINT_URL_DYNAMODB"]
    argv = ["--endpoint-url", endpoint, "--handler", f"samples.app.{handler}.handler"]
    argv += ["--event", str(ROOT / "samples" / "events" / event), "--times", "2"]

    assert 0 == main(argv)

    out = capsys.readouterr().out
    assert 2 == out.count(expected)
    assert "decision: REPLAYED" in out


def test_sample_events_are_valid_json() -> None:
    """The sample events parse and carry records or an HTTP API request."""
    for path in (ROOT / "samples" / "events").glob("*.json"):
        event = json.loads(path.read_text(encoding="utf-8"))
        assert "Records" in event or event.get("version") == "2.0", path.name


def test_make_demo_passes_handler_and_event() -> None:
    """``make demo HANDLER=... EVENT=...`` runs the single-handler mode."""
    dry_run = subprocess.run(
        ["make", "-n", "demo", "HANDLER=samples.app.create_order.handler", "EVENT=e.json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--handler samples.app.create_order.handler --event e.json" in dry_run


def test_totals_are_decimal_exact(app: LocalApp) -> None:
    """Money is summed as Decimal end to end: 0.1 + 0.2 is 0.3 in the totals."""
    from samples.local_lambda import stream_event

    customer = f"frank-{app.run_id}"
    app.stream.read()  # skip what earlier tests wrote
    app.post_order(order_body(customer, ("A-1", 1, "0.10")), f"a-{app.run_id}")
    app.post_order(order_body(customer, ("A-2", 1, "0.20")), f"b-{app.run_id}")
    records = [
        r
        for r in app.stream.read()
        if r["dynamodb"].get("NewImage", {}).get("customer_id", {}).get("S") == customer
    ]

    app.call("ProjectOrdersFunction", stream_event(records))

    assert Decimal("0.30") == app.totals(customer)["ordered_total_EUR"]


# ------------------------------------------------------------------- the demo's own accounting


def answer(status: int, *, replayed: bool = False, title: str | None = None) -> Response:
    """Return a CreateOrder answer as the demo reads it."""
    headers = {"idempotent-replayed": "true"} if replayed else {}
    if status == 409:
        headers["retry-after"] = "1"
    body: Any = {"order_id": "ord_1"} if title is None else {"title": title, "status": status}
    return Response(status, headers, body)


OUTSTANDING_TITLE = "A request is outstanding for this Idempotency-Key"


def test_a_single_201_does_not_pass_the_replay_check() -> None:
    """One 201 and nine 409s, with no replay anywhere, fail: the check counts replays."""
    t, lines = transcript()
    refused = [answer(409, title=OUTSTANDING_TITLE) for _ in range(9)]

    expect_duplicates(
        t, [answer(201), *refused], answer(409, title=OUTSTANDING_TITLE), replays=0, refusals=10
    )

    assert any("replays" in failure for failure in t.failures), "\n".join(lines)


def test_replayed_201s_must_match_the_library_replays() -> None:
    """Replayed answers the library did not decide (or 409s it did not refuse) fail the check."""
    t, _ = transcript()
    refused = [answer(409, title=OUTSTANDING_TITLE) for _ in range(8)]
    concurrent = [answer(201), answer(201, replayed=True), *refused]

    expect_duplicates(t, concurrent, answer(201, replayed=True), replays=1, refusals=7)

    assert 2 == len(t.failures), t.failures  # 2 replays against 1 decision; 8 409s against 7


def test_the_duplicate_check_passes_when_every_answer_is_accounted_for() -> None:
    """One fresh 201, the replays and the 409s all matching the decisions: no failure."""
    t, lines = transcript()
    refused = [answer(409, title=OUTSTANDING_TITLE) for _ in range(8)]
    concurrent = [answer(201), answer(201, replayed=True), *refused]

    expect_duplicates(t, concurrent, answer(201, replayed=True), replays=2, refusals=8)

    assert [] == t.failures, "\n".join(lines)


def test_the_summary_explains_every_answer(app: LocalApp) -> None:
    """The summary names the 409s, the 422 and both 400s, with what each means.

    (The session's app has served other tests too: only this account is checked here; the
    scenario's own checks pass in `test_demo_scenario_passes_every_check`.)
    """
    t, lines = transcript()
    run_scenario(app, t)
    summary = lines[next(i for i, line in enumerate(lines) if "5. Summary" in line) :]
    text = "\n".join(summary)

    for status, meaning in [
        (409, "the same key still running"),
        (422, "the key reused with another body"),
        (400, "no Idempotency-Key"),
        (400, "an invalid body"),
        (201, "a new order"),
        (201, "replayed"),
    ]:
        assert any(f"{status} x" in line and meaning in line for line in summary), text
    assert any("[ok] every answer is explained" in line for line in summary), text


def test_the_summary_counts_agree_with_each_other(app: LocalApp) -> None:
    """CreateOrder's row, its account of answers and the metrics tell one story: every
    invocation has an answer (a failed one API Gateway's 500), every run and replay is one."""
    t, lines = transcript()
    run_scenario(app, t)
    summary = lines[next(i for i, line in enumerate(lines) if "5. Summary" in line) :]
    text = "\n".join(summary)

    row = next(line.split() for line in summary if line.split()[:1] == ["CreateOrderFunction"])
    invocations, requests, ran, replayed = map(int, row[1:5])
    answered = next(line for line in summary if "CreateOrderFunction answered" in line)
    account = next(line for line in summary if "every answer is explained" in line)
    # "every answer is explained: 21 = 8 ran + 2 replayed + 11 refused before the handler"
    total, account_ran, account_replayed, _ = (
        int(word) for word in account.split(":", 1)[1].split() if word.isdigit()
    )
    assert (invocations, invocations) == (requests, int(answered.split()[2])), text
    assert (invocations, ran, replayed) == (total, account_ran, account_replayed), text
    assert any("500 x" in line and "commit failed" in line for line in summary), text
    # The metrics line is one of the scenario's checks (test_demo_scenario_passes_every_check).


def test_an_answer_the_demo_cannot_explain_fails_the_summary() -> None:
    """An answer of no known kind is listed and fails the summary's check."""
    t, lines = transcript()

    explain_answers(t, "CreateOrderFunction", [answer(201), answer(503, title="Unavailable")])

    assert 1 == len(t.failures), lines
    assert any("not explained: [503]" in line for line in lines), lines


def test_the_same_key_from_another_caller_is_another_order(app: LocalApp) -> None:
    """Keys are scoped by the JWT ``sub``: another user's request with the key is its own."""
    key = f"shared-{app.run_id}"
    mine = app.post_order(order_body(f"kim-{app.run_id}", ("BOOK-1", 1, "9.99")), key)
    theirs = app.post_order(
        order_body(f"lee-{app.run_id}", ("BOOK-1", 1, "9.99")), key, caller=OTHER_CALLER
    )

    assert (201, 201) == (mine.status, theirs.status)
    assert "idempotent-replayed" not in theirs.headers
    assert order_id_for(key, OTHER_CALLER) == theirs.body["order_id"] != mine.body["order_id"]
