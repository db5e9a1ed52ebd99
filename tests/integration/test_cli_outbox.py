"""`idempotent-lambda outbox` and doctor's stream check, against moto's server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from idempotent_lambda import IdempotencyConfig, idempotent
from idempotent_lambda.cli import main
from idempotent_lambda.outbox import emit, publish_handler
from tests.integration._outbox_stack import SOURCE, OutboxStack, client


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out


def emit_orders(stack: OutboxStack, *orders: str) -> list[str]:
    @idempotent(persistence_store=stack.store, config=IdempotencyConfig(event_key_jmespath="o"))
    def handler(event: dict[str, Any], context: Any) -> str:
        return emit("OrderCreated", {"order": event["o"]}, source=SOURCE, event_bus_name=stack.bus)

    return [handler({"o": order}, None) for order in orders]


def test_list_shows_unpublished_events_with_their_age_and_republish_sends_one(
    stack: OutboxStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unpublished events are listed oldest first; republish delivers one and marks it."""
    table = ["--table", stack.table, "--endpoint-url", stack.endpoint]
    first, second = emit_orders(stack, "o-1", "o-2")
    code, out = run(capsys, "outbox", "list", *table, "--json")
    listed = [json.loads(line) for line in out.splitlines()]
    assert 0 == code
    assert [first, second] == [e["event_id"] for e in listed]
    assert all(e["age_seconds"] >= 0 and e["published_at"] is None for e in listed)

    code, out = run(capsys, "outbox", "republish", *table, second)
    assert (0, f"published {second} (OrderCreated)\n") == (code, out)
    bodies = [json.loads(m["Body"]) for m in stack.received()]
    assert [second] == [b["detail"]["outbox"]["id"] for b in bodies]
    code, out = run(capsys, "outbox", "list", *table, "--json")
    assert [first] == [json.loads(line)["event_id"] for line in out.splitlines()]

    publish = publish_handler(stack.store, events_client=stack.events)
    assert {"batchItemFailures": []} == publish({"Records": stack.stream_records()}, None)
    assert [first] == [json.loads(m["Body"])["detail"]["outbox"]["id"] for m in stack.received()]
    capsys.readouterr()  # the publisher's metrics
    code, out = run(capsys, "outbox", "list", *table, "--json")
    assert "" == out


def test_republish_of_an_unknown_event_finds_nothing(
    stack: OutboxStack, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "outbox",
            "republish",
            "--table",
            stack.table,
            "--endpoint-url",
            stack.endpoint,
            "00000000-0000-0000-0000-000000000000",
        ]
    )
    assert 1 == code


def doctor_line(out: str) -> str | None:
    return next((line for line in out.splitlines() if "outbox stream" in line), None)


def test_doctor_checks_the_stream_when_outbox_items_exist_or_when_asked(
    make_table: Any,
    dynamodb_endpoint: str,
    capsys: pytest.CaptureFixture[str],
    stack: OutboxStack,
) -> None:
    """No stream and no outbox item: no check; asked, or with an item: fail; a stream: ok."""
    name = make_table()
    base = ["doctor", "--table", name, "--endpoint-url", dynamodb_endpoint]
    assert doctor_line(run(capsys, *base)[1]) is None
    code, out = run(capsys, *base, "--outbox")
    assert (1, "fail  outbox stream: no stream: outbox events are never published") == (
        code,
        doctor_line(out),
    )
    client("dynamodb", dynamodb_endpoint).put_item(
        TableName=name,
        Item={
            "id": {"S": "p#0#outbox#00000000-0000-0000-0000-000000000000"},
            "outbox_id": {"S": "x"},
            "outbox_emitted_at": {"N": "1"},
            "outbox_detail_type": {"S": "T"},
            "outbox_detail": {"S": "{}"},
            "outbox_source": {"S": "s"},
        },
    )
    assert "fail  outbox stream" in str(doctor_line(run(capsys, *base)[1]))
    stream_table = ["doctor", "--table", stack.table, "--endpoint-url", dynamodb_endpoint]
    assert "ok    outbox stream: stream enabled (NEW_IMAGE)" == doctor_line(
        run(capsys, *stream_table)[1]
    )


def test_records_list_names_the_outbox_items_it_skips(
    stack: OutboxStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outbox items are not records: `records list` counts them apart and says where they show."""
    emit_orders(stack, "o-1", "o-2")
    code = main(["records", "list", "--table", stack.table, "--endpoint-url", stack.endpoint])
    err = capsys.readouterr().err

    assert 0 == code
    assert (
        "skipped 2 items that are not idempotency records, 2 of them outbox events "
        "(see `outbox list`)"
    ) in err
