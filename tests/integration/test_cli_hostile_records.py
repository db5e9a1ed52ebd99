"""The operator CLI on hostile records: escaped output, huge numbers, absurd times, user data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from idempotent_lambda import DynamoDBPersistenceLayer
from idempotent_lambda._clock import SYSTEM_CLOCK
from tests.integration import test_cli_operator
from tests.integration.test_cli_operator import SECRET, seed

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

cli = test_cli_operator.cli
on_table = test_cli_operator.on_table
#: A key with a terminal title escape, a CSI (C1), DEL, and bidi controls.
HOSTILE = "orders#\x1b]0;pwned\x07\x9b31m\x7f\u202eevil\u2066x\u2069"
RAW = ("\x1b", "\x07", "\x9b", "\x7f", "\u202e", "\u2066", "\u2069")


def assert_no_raw_controls(text: str) -> None:
    """Fail when `text` holds a control or bidi character a terminal would obey."""
    assert [] == [char for char in RAW if char in text]


def test_release_stuck_escapes_keys_in_its_table_and_its_lines(
    cli: Any, on_table: list[str], dynamodb_store: DynamoDBPersistenceLayer
) -> None:
    """The dry-run table and the --yes lines show a hostile key escaped."""
    seed(dynamodb_store, HOSTILE, lease=SYSTEM_CLOCK.now_ms() - 120_000)

    dry = cli("records", "release-stuck", *on_table)
    done = cli("records", "release-stuck", "--yes", *on_table)

    for run in (dry, done):
        assert_no_raw_controls(run.out + run.err)
        assert "orders#\\x1b]0;pwned\\x07\\x9b31m\\x7f\\u202eevil" in run.out
    assert done.out.startswith("released orders#\\x1b")


def test_delete_escapes_the_key_it_deleted(
    cli: Any, on_table: list[str], dynamodb_store: DynamoDBPersistenceLayer
) -> None:
    """`records delete` prints the deleted key escaped."""
    seed(dynamodb_store, HOSTILE, result='{"ok":1}')
    run = cli("records", "delete", *on_table, HOSTILE)
    assert 0 == run.code
    assert_no_raw_controls(run.out + run.err)
    assert "\\u202eevil" in run.out


def test_json_output_escapes_controls_and_still_decodes_to_the_value(
    cli: Any, on_table: list[str], dynamodb_store: DynamoDBPersistenceLayer
) -> None:
    """Every --json output holds `\\u` escapes instead of the characters, and decodes back."""
    seed(dynamodb_store, HOSTILE, lease=SYSTEM_CLOCK.now_ms() - 120_000)
    seed(dynamodb_store, "orders#note", result=json.dumps({"note": "\x9b\u202e\x7f"}))

    runs = {
        "list": cli("records", "list", "--json", *on_table),
        "get": cli("records", "get", "--json", "--data", *on_table, "orders#note"),
        "release": cli("records", "release-stuck", "--json", *on_table),
        "delete": cli("records", "delete", "--json", *on_table, HOSTILE),
    }

    for run in runs.values():
        assert_no_raw_controls(run.out)
    assert HOSTILE in [line["key"] for line in runs["list"].lines()]
    assert {"note": "\x9b\u202e\x7f"} == runs["get"].json()["result"]
    assert [HOSTILE] == [line["key"] for line in runs["release"].lines()]
    assert HOSTILE == runs["delete"].json()["record"]["key"]


def test_get_of_a_huge_decimal_finishes_at_once(
    on_table: list[str], dynamodb_store: DynamoDBPersistenceLayer
) -> None:
    """A stored Decimal("1E+999999999") is shown as its text instead of being expanded."""
    seed(dynamodb_store, "orders#huge", result='{"$decimal":"1E+999999999"}')
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    argv = ["records", "get", "--json", "--data", "--record-format", "native", *on_table]
    argv.append("orders#huge")
    done = subprocess.run(
        [sys.executable, "-m", "idempotent_lambda", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,  # generous: the run takes about a second; expanding the number, hours
        check=False,
    )
    assert (0, "1E+999999999") == (done.returncode, json.loads(done.stdout)["result"])


def test_an_absurd_expiration_is_shown_as_invalid_not_a_failure(
    cli: Any,
    on_table: list[str],
    idempotency_table: str,
    dynamodb_client: DynamoDBClient,
    dynamodb_store: DynamoDBPersistenceLayer,
) -> None:
    """One item with an expiration past any calendar is listed as INVALID and left alone."""
    now = SYSTEM_CLOCK.now_ms()
    seed(dynamodb_store, "orders#stuck", lease=now - 120_000)
    seed(dynamodb_store, "orders#done", result='{"ok":1}')
    dynamodb_client.put_item(
        TableName=idempotency_table,
        Item={
            "id": {"S": "orders#absurd"},
            "status": {"S": "IN_PROGRESS"},
            "expiration": {"N": "9" * 20},  # seconds: far past the year 9999
            "in_progress_expiration": {"N": str(now - 120_000)},
            "owner": {"S": "o"},
        },
    )

    listed = cli("records", "list", *on_table)
    as_json = {line["key"]: line for line in cli("records", "list", "--json", *on_table).lines()}
    released = cli("records", "release-stuck", "--yes", *on_table)

    assert 0 == listed.code
    rows = {line.split()[0]: line.split()[1] for line in listed.out.splitlines()[1:]}
    assert {"orders#absurd": "INVALID", "orders#done": "COMPLETED"}.items() <= rows.items()
    assert "a timestamp is out of range" == as_json["orders#absurd"]["invalid"]
    assert as_json["orders#done"]["invalid"] is None
    assert 0 == released.code
    assert "released orders#stuck" in released.out
    assert "left alone (a timestamp is out of range): orders#absurd" in released.out
    assert dynamodb_store.get("orders#absurd") is not None
    assert "INVALID" in cli("records", "get", *on_table, "orders#absurd").out


def test_get_shows_the_stored_result_only_with_data(
    cli: Any, on_table: list[str], dynamodb_store: DynamoDBPersistenceLayer
) -> None:
    """Without --data, `records get` says a result exists but shows none of it."""
    seed(dynamodb_store, "orders#done", result=json.dumps({"card": SECRET}))

    text = cli("records", "get", *on_table, "orders#done")
    as_json = cli("records", "get", "--json", *on_table, "orders#done")
    with_data = cli("records", "get", "--data", *on_table, "orders#done")

    assert SECRET not in text.out + as_json.out
    assert "result      not shown (--data shows it)" in text.out
    assert "result" not in as_json.json()
    assert SECRET in with_data.out
