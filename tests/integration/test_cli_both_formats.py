"""The operator CLI on a table that real Powertools 3.37 and this library (both formats) write.

Powertools spells IN_PROGRESS ``INPROGRESS`` and writes no owner; this library writes
``IN_PROGRESS`` in its native format and Powertools' spelling in the default one. `records list`,
`get`, `delete` and `release-stuck` must show and handle all of them, and `key` must print the
key Powertools really wrote.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyRecord, Status
from idempotent_lambda._clock import SYSTEM_CLOCK
from idempotent_lambda.cli import main
from idempotent_lambda.testing import FakeLambdaContext

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

pt = pytest.importorskip("aws_lambda_powertools.utilities.idempotency")

LIVE_MS = 600_000


class Crash(BaseException):
    """Ends an invocation as a timeout does: Powertools leaves its INPROGRESS record behind."""


class Overdue:
    """The Lambda context of an invocation whose deadline passed ten minutes ago.

    Powertools sets the lease to now plus the remaining time, so the record it writes for this
    invocation has a lease that ended then: a crashed invocation found later by an operator.
    """

    def get_remaining_time_in_millis(self) -> int:
        return -LIVE_MS


def order(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The function Powertools decorates; events with ``"crash"`` never finish."""
    if event.get("crash"):
        raise Crash
    return {"order": event["id"], "total": 10}


@dataclass
class Run:
    """What one CLI run returned and printed."""

    code: int
    out: str
    err: str

    def lines(self) -> list[Any]:
        """Return stdout parsed as JSON Lines."""
        return [json.loads(line) for line in self.out.splitlines()]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], idempotency_table: str, dynamodb_endpoint: str) -> Any:
    """Return ``run(*argv) -> Run``: ``main`` in-process, pointed at the test table."""
    table = ["--table", idempotency_table, "--endpoint-url", dynamodb_endpoint]

    def run(*argv: str) -> Run:
        code = main([*argv, *table] if argv[0] == "records" else list(argv))
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err
        return Run(code, captured.out, captured.err)

    return run


@pytest.fixture
def powertools(
    idempotency_table: str, dynamodb_client: DynamoDBClient, monkeypatch: pytest.MonkeyPatch
) -> Callable[[dict[str, Any], Any], str]:
    """Return ``invoke(event, context) -> key``: run ``order`` under real Powertools."""
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    layer = pt.DynamoDBPersistenceLayer(table_name=idempotency_table, boto3_client=dynamodb_client)
    handler = pt.idempotent(
        persistence_store=layer, config=pt.IdempotencyConfig(event_key_jmespath="id")
    )(order)

    written: dict[str, str] = {}

    def invoke(event: dict[str, Any], context: Any) -> str:
        before = keys_on(dynamodb_client, idempotency_table)
        with contextlib.suppress(Crash):
            handler(event, context)
        for key in keys_on(dynamodb_client, idempotency_table) - before:
            written[event["id"]] = key
        return written[event["id"]]

    return invoke


def keys_on(client: DynamoDBClient, table: str) -> set[str]:
    """Return the keys of every item on ``table``."""
    return {item["id"]["S"] for item in client.scan(TableName=table)["Items"]}


@dataclass
class Seeded:
    """The keys of the records on the table, by who wrote them and in which state."""

    pt_done: str
    pt_live: str
    pt_stuck: str
    pt_unleased: str
    ours_stuck: str
    native_stuck: str


@pytest.fixture
def seeded(
    powertools: Callable[[dict[str, Any], Any], str], dynamodb_store: DynamoDBPersistenceLayer
) -> Seeded:
    """Fill the table: four records by Powertools, a stuck claim of ours in each format."""
    keys = Seeded(
        pt_done=powertools({"id": "done"}, FakeLambdaContext()),
        pt_live=powertools({"id": "live", "crash": 1}, FakeLambdaContext(timeout_ms=LIVE_MS)),
        pt_stuck=powertools({"id": "stuck", "crash": 1}, Overdue()),
        pt_unleased=unleased(powertools),
        ours_stuck="ours.default#stuck",
        native_stuck="ours.native#stuck",
    )
    now = SYSTEM_CLOCK.now_ms()
    for store, key in (
        (dynamodb_store.with_record_format("powertools"), keys.ours_stuck),
        (dynamodb_store, keys.native_stuck),
    ):
        claim = IdempotencyRecord(
            key,
            Status.IN_PROGRESS,
            expiry_timestamp=now // 1000 + 3600,
            in_progress_expiry_timestamp=now - LIVE_MS,
            owner=f"owner-of-{key}",
        )
        assert store.claim(claim, now_ms=now, lease_cutoff_ms=now - LIVE_MS).claimed
    return keys


def unleased(powertools: Callable[[dict[str, Any], Any], str]) -> str:
    """Run Powertools without a context: its claim has no lease end, it is live until expiry."""
    with pytest.warns(UserWarning, match="remaining time"):
        return powertools({"id": "unleased", "crash": 1}, None)


def stored_status(client: DynamoDBClient, table: str, key: str) -> str | None:
    """Return the status attribute as stored, spelling included; None when the item is gone."""
    item = client.get_item(TableName=table, Key={"id": {"S": key}}).get("Item")
    return None if item is None else item["status"]["S"]


def test_the_table_holds_both_spellings(
    seeded: Seeded, dynamodb_client: DynamoDBClient, idempotency_table: str
) -> None:
    """The premise: Powertools and the default format write INPROGRESS, the native IN_PROGRESS."""
    assert ["COMPLETED", "INPROGRESS", "INPROGRESS", "INPROGRESS", "INPROGRESS", "IN_PROGRESS"] == [
        stored_status(dynamodb_client, idempotency_table, key)
        for key in (
            seeded.pt_done,
            seeded.pt_live,
            seeded.pt_stuck,
            seeded.pt_unleased,
            seeded.ours_stuck,
            seeded.native_stuck,
        )
    ]


def test_list_shows_every_record_of_both_formats(cli: Any, seeded: Seeded) -> None:
    """Nothing is skipped as "not an idempotency record"; statuses and stuck flags are right."""
    run = cli("records", "list", "--json")

    shown = {view["key"]: (view["status"], view["stuck"]) for view in run.lines()}
    assert {
        seeded.pt_done: ("COMPLETED", False),
        seeded.pt_live: ("IN_PROGRESS", False),
        seeded.pt_stuck: ("IN_PROGRESS", True),
        seeded.pt_unleased: ("IN_PROGRESS", False),
        seeded.ours_stuck: ("IN_PROGRESS", True),
        seeded.native_stuck: ("IN_PROGRESS", True),
    } == shown
    assert "skipped" not in run.err


def test_list_json_stored_status_is_the_stored_spelling(
    cli: Any, seeded: Seeded, dynamodb_client: DynamoDBClient, idempotency_table: str
) -> None:
    """Under the default format `stored_status` is the literal value in the table: INPROGRESS."""
    shown = {
        view["key"]: view["stored_status"] for view in cli("records", "list", "--json").lines()
    }

    assert "INPROGRESS" == shown[seeded.pt_live]
    assert (
        stored_status(dynamodb_client, idempotency_table, seeded.pt_live) == shown[seeded.pt_live]
    )
    assert "COMPLETED" == shown[seeded.pt_done]


@pytest.mark.parametrize("status", ["IN_PROGRESS", "INPROGRESS", "inprogress"])
def test_list_filters_match_either_spelling(cli: Any, seeded: Seeded, status: str) -> None:
    """--status IN_PROGRESS (or Powertools' INPROGRESS), --stuck and --prefix see both formats."""

    def keys(*options: str) -> set[str]:
        return {view["key"] for view in cli("records", "list", "--json", *options).lines()}

    in_progress = {seeded.pt_live, seeded.pt_stuck, seeded.pt_unleased}
    stuck = {seeded.pt_stuck, seeded.ours_stuck, seeded.native_stuck}
    assert in_progress | stuck == keys("--status", status)
    assert stuck == keys("--stuck")
    assert {seeded.pt_stuck} == keys("--stuck", "--prefix", "test-func.")


def test_get_shows_a_powertools_record_in_progress_and_completed(cli: Any, seeded: Seeded) -> None:
    """`records get` reads INPROGRESS (its lease included) and shows Powertools' result."""
    live = cli("records", "get", "--json", seeded.pt_live)
    assert (0, "IN_PROGRESS", False) == (
        live.code,
        *(live.lines()[0][k] for k in ("status", "stuck")),
    )
    assert 0 < live.lines()[0]["lease_remaining_seconds"] <= LIVE_MS / 1000

    done = cli("records", "get", "--json", "--data", seeded.pt_done)
    assert {"order": "done", "total": 10} == done.lines()[0]["result"]
    text = cli("records", "get", seeded.pt_unleased)
    assert "IN_PROGRESS" in text.out
    assert "unknown" not in text.err


def test_delete_keeps_a_live_powertools_claim_unless_forced(
    cli: Any, seeded: Seeded, dynamodb_client: DynamoDBClient, idempotency_table: str
) -> None:
    """A live INPROGRESS record (with a lease, or live until expiry) is not deleted by default."""
    for key in (seeded.pt_live, seeded.pt_unleased):
        run = cli("records", "delete", key)
        assert (2, True) == (run.code, "IN_PROGRESS with a live lease" in run.err)
        assert "INPROGRESS" == stored_status(dynamodb_client, idempotency_table, key)
    assert 0 == cli("records", "delete", "--force", "--yes", seeded.pt_live).code
    assert stored_status(dynamodb_client, idempotency_table, seeded.pt_live) is None
    assert 0 == cli("records", "delete", seeded.pt_stuck).code


def test_release_stuck_releases_every_format_and_nothing_live(
    cli: Any,
    seeded: Seeded,
    dynamodb_client: DynamoDBClient,
    idempotency_table: str,
    powertools: Callable[[dict[str, Any], Any], str],
) -> None:
    """Stuck claims of Powertools and of both our formats go; live ones and results stay."""
    dry = cli("records", "release-stuck", "--json")
    assert {seeded.pt_stuck, seeded.ours_stuck, seeded.native_stuck} == {
        line["key"] for line in dry.lines()
    }

    run = cli("records", "release-stuck", "--json", "--yes")

    assert [True, True, True] == [line["released"] for line in run.lines()]
    remaining = {
        key: stored_status(dynamodb_client, idempotency_table, key) for key in vars(seeded).values()
    }
    assert {
        seeded.pt_done: "COMPLETED",
        seeded.pt_live: "INPROGRESS",
        seeded.pt_unleased: "INPROGRESS",
        seeded.pt_stuck: None,
        seeded.ours_stuck: None,
        seeded.native_stuck: None,
    } == remaining
    powertools({"id": "stuck"}, FakeLambdaContext())  # the released key runs again, and completes
    assert "COMPLETED" == stored_status(dynamodb_client, idempotency_table, seeded.pt_stuck)


def test_release_spares_a_powertools_claim_made_since_the_scan(
    seeded: Seeded,
    dynamodb_store: DynamoDBPersistenceLayer,
    powertools: Callable[[dict[str, Any], Any], str],
    dynamodb_client: DynamoDBClient,
    idempotency_table: str,
) -> None:
    """Powertools took the stuck key over after the scan: the fenced delete leaves it alone."""
    now = SYSTEM_CLOCK.now_ms()
    (seen,) = [
        record
        for page in dynamodb_store.scan()
        for record in page.records
        if record.idempotency_key == seeded.pt_stuck
    ]
    powertools({"id": "stuck", "crash": 1}, FakeLambdaContext(timeout_ms=LIVE_MS))

    assert not dynamodb_store.release_if_stuck(seen, cutoff_ms=now - 1000)
    assert "INPROGRESS" == stored_status(dynamodb_client, idempotency_table, seeded.pt_stuck)


def test_key_prints_the_key_powertools_wrote(
    cli: Any,
    seeded: Seeded,
    tmp_path: Path,
    idempotency_table: str,
    dynamodb_client: DynamoDBClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Powertools' format: md5, test-func without a function name; the record is found by it."""
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"id": "done"}), encoding="utf-8")
    handler = f"{order.__module__}:{order.__qualname__}"

    run = cli(
        "key", "--record-format", "powertools", "--handler", handler, "--jmespath", "id", str(event)
    )

    assert (0, seeded.pt_done + "\n") == (run.code, run.out)
    found = cli("records", "get", "--json", "--data", run.out.strip())
    assert {"order": "done", "total": 10} == found.lines()[0]["result"]

    before = keys_on(dynamodb_client, idempotency_table)
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "orders-prod")
    layer = pt.DynamoDBPersistenceLayer(table_name=idempotency_table, boto3_client=dynamodb_client)
    pt.idempotent(persistence_store=layer, config=pt.IdempotencyConfig(event_key_jmespath="id"))(
        order
    )({"id": "prod"}, FakeLambdaContext())
    (written,) = keys_on(dynamodb_client, idempotency_table) - before
    event.write_text(json.dumps({"id": "prod"}), encoding="utf-8")
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME")
    argv = ["--handler", handler, "--function-name", "orders-prod", "--jmespath", "id", str(event)]
    named = cli("key", "--record-format", "powertools", *argv)
    assert (0, written + "\n") == (named.code, named.out)


def test_composite_key_table_written_by_powertools(
    capsys: pytest.CaptureFixture[str],
    make_table: Callable[..., str],
    dynamodb_client: DynamoDBClient,
    dynamodb_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a sort key, Powertools' partition and spelling are read; its stuck claim is released."""
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "orders-prod")
    table = make_table(key_attr="pk", sort_key_attr="sk")
    layer = pt.DynamoDBPersistenceLayer(
        table_name=table, key_attr="pk", sort_key_attr="sk", boto3_client=dynamodb_client
    )
    handler = pt.idempotent(
        persistence_store=layer, config=pt.IdempotencyConfig(event_key_jmespath="id")
    )(order)
    handler({"id": "done"}, FakeLambdaContext())
    with contextlib.suppress(Crash):
        handler({"id": "stuck", "crash": 1}, Overdue())
    options = ["--table", table, "--endpoint-url", dynamodb_endpoint, "--key-attr", "pk"]
    options += ["--sort-key-attr", "sk", "--static-pk-value", "idempotency#orders-prod"]

    def run(*argv: str) -> list[Any]:
        assert 0 == main([*argv, "--json", *options])
        return [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    listed = {view["status"]: view["stuck"] for view in run("records", "list")}
    released = run("records", "release-stuck", "--yes")

    assert {"COMPLETED": False, "IN_PROGRESS": True} == listed
    assert [True] == [line["released"] for line in released]
    assert ["COMPLETED"] == [view["status"] for view in run("records", "list")]
