"""The operator CLI against a DynamoDB-compatible server: list, get, delete, release, create."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from idempotent_lambda import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    IdempotencyRecord,
    Status,
    idempotent,
)
from idempotent_lambda._clock import SYSTEM_CLOCK
from idempotent_lambda.cli import main
from idempotent_lambda.cli._output import relative

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

SECRET = "card-4111-1111-1111-1111"


@dataclass
class Run:
    """What one CLI run returned and printed."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        """Return stdout parsed as JSON."""
        return json.loads(self.out)

    def lines(self) -> list[Any]:
        """Return stdout parsed as JSON Lines."""
        return [json.loads(line) for line in self.out.splitlines()]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Any:
    """Return ``run(*argv) -> Run``, calling ``main`` in-process."""

    def run(*argv: str) -> Run:
        code = main(list(argv))
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err
        return Run(code, captured.out, captured.err)

    return run


@pytest.fixture
def on_table(idempotency_table: str, dynamodb_endpoint: str) -> list[str]:
    """Return the options that point a command at the test table."""
    return ["--table", idempotency_table, "--endpoint-url", dynamodb_endpoint]


def seed(store: DynamoDBPersistenceLayer, key: str, **fields: Any) -> IdempotencyRecord:
    """Write one record as the engine would: claim it, then complete it when asked to."""
    now = SYSTEM_CLOCK.now_ms()
    claim = IdempotencyRecord(
        idempotency_key=key,
        status=Status.IN_PROGRESS,
        expiry_timestamp=fields.get("expiry", now // 1000 + 3600),
        in_progress_expiry_timestamp=fields.get("lease", now + 600_000),
        owner=fields.get("owner", f"owner-{key}"),
    )
    assert store.claim(claim, now_ms=now, lease_cutoff_ms=now).claimed
    if "result" not in fields:
        return claim
    done = IdempotencyRecord(
        idempotency_key=key,
        status=Status.COMPLETED,
        expiry_timestamp=claim.expiry_timestamp,
        response_data=fields["result"],
        payload_hash=fields.get("payload_hash"),
        owner=claim.owner,
    )
    assert store.complete(done)
    return done


@pytest.fixture
def seeded(dynamodb_store: DynamoDBPersistenceLayer) -> dict[str, IdempotencyRecord]:
    """Seed one record of each kind: completed, live, stuck, expired."""
    now = SYSTEM_CLOCK.now_ms()
    return {
        "completed": seed(dynamodb_store, "orders#done", result=json.dumps({"card": SECRET})),
        "live": seed(dynamodb_store, "orders#live"),
        "stuck": seed(dynamodb_store, "orders#stuck", lease=now - 120_000),
        "expired": seed(dynamodb_store, "refunds#old", result='{"ok":1}', expiry=now // 1000 - 60),
    }


# --- records list --------------------------------------------------------------------------------


def test_list_shows_every_record_without_results(
    cli: Any, on_table: list[str], seeded: dict[str, IdempotencyRecord]
) -> None:
    """The table shows keys, statuses and times, never the stored results."""
    run = cli("records", "list", *on_table)
    assert 0 == run.code
    lines = run.out.splitlines()
    assert ["KEY", "STATUS", "EXPIRES", "LEASE", "OWNER"] == lines[0].split()
    by_key = {line.split()[0]: line for line in lines[1:]}
    assert {"orders#done", "orders#live", "orders#stuck", "refunds#old"} == set(by_key)
    assert "COMPLETED" in by_key["orders#done"]
    assert "EXPIRED" in by_key["refunds#old"]
    assert "STUCK" in by_key["orders#stuck"]
    assert "STUCK" not in by_key["orders#live"]
    assert SECRET not in run.out + run.err
    assert "4 records" in run.err


def test_list_json_and_filters(
    cli: Any, on_table: list[str], seeded: dict[str, IdempotencyRecord]
) -> None:
    """--json gives views for scripts; --status, --stuck, --prefix and --limit filter."""

    def keys(*options: str) -> list[str]:
        run = cli("records", "list", "--json", *on_table, *options)
        assert 0 == run.code
        return sorted(view["key"] for view in run.lines())

    everything = cli("records", "list", "--json", *on_table).lines()
    assert SECRET not in json.dumps(everything)
    stuck_view = next(v for v in everything if v["key"] == "orders#stuck")
    assert stuck_view["stuck"] is True
    assert stuck_view["lease_remaining_seconds"] < -100
    assert stuck_view["lease_ends_at"].endswith("Z")
    assert ["orders#done"] == keys("--status", "completed")
    assert ["refunds#old"] == keys("--status", "EXPIRED")
    assert ["orders#live", "orders#stuck"] == keys("--status", "IN_PROGRESS")
    assert ["orders#stuck"] == keys("--stuck")
    assert ["orders#done", "orders#live", "orders#stuck"] == keys("--prefix", "orders#")
    assert 2 == len(keys("--limit", "2"))


def test_json_is_one_record_per_line(
    cli: Any, on_table: list[str], seeded: dict[str, IdempotencyRecord]
) -> None:
    """--json writes JSON Lines: each line of stdout is one record, whole."""
    run = cli("records", "list", "--json", *on_table)
    lines = run.out.splitlines()
    assert 4 == len(lines)
    assert {r.idempotency_key for r in seeded.values()} == {json.loads(x)["key"] for x in lines}


def test_table_defaults_to_the_functions_environment_variable(
    cli: Any,
    dynamodb_endpoint: str,
    idempotency_table: str,
    seeded: dict[str, IdempotencyRecord],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """IDEMPOTENCY_TABLE (what the sample functions read) stands in for --table."""
    monkeypatch.setenv("IDEMPOTENCY_TABLE", idempotency_table)
    run = cli("records", "list", "--json", "--endpoint-url", dynamodb_endpoint)
    assert 4 == len(run.lines())


def test_long_scans_page_and_show_progress(
    cli: Any, on_table: list[str], seeded: dict[str, IdempotencyRecord]
) -> None:
    """A paged scan reads every page and summarises its progress on stderr, not stdout."""
    run = cli("records", "list", "--json", "--page-size", "1", *on_table)
    assert 4 == len(run.lines())
    assert "scanned 4 items in" in run.err
    assert "scanning:" not in run.err  # the progress line is for a terminal only

    quiet = cli("records", "list", "--quiet", "--page-size", "1", *on_table)
    assert "" == quiet.err


def test_items_that_are_not_records_are_skipped(
    cli: Any,
    on_table: list[str],
    idempotency_table: str,
    dynamodb_client: DynamoDBClient,
    seeded: dict[str, IdempotencyRecord],
) -> None:
    """A foreign item in the table is counted and skipped, not a crash."""
    dynamodb_client.put_item(TableName=idempotency_table, Item={"id": {"S": "something-else"}})
    run = cli("records", "list", *on_table)
    assert 0 == run.code
    assert "skipped 1 items that are not idempotency records" in run.err


def test_composite_key_tables_are_queried(
    cli: Any, make_table: Any, dynamodb_client: DynamoDBClient, dynamodb_endpoint: str
) -> None:
    """With --sort-key-attr the store's partition is queried; other partitions are not read."""
    table = make_table(sort_key_attr="sk")
    store = DynamoDBPersistenceLayer(
        table, sort_key_attr="sk", static_pk_value="idem#fn", boto3_client=dynamodb_client
    )
    seed(store, "orders#one", result='{"ok":1}')
    dynamodb_client.put_item(
        TableName=table, Item={"id": {"S": "customer#9"}, "sk": {"S": "profile"}}
    )
    options = ["--table", table, "--endpoint-url", dynamodb_endpoint, "--sort-key-attr", "sk"]

    missing = cli("records", "list", *options)
    assert 2 == missing.code
    assert "--static-pk-value" in missing.err

    options += ["--static-pk-value", "idem#fn"]
    listed = cli("records", "list", "--json", *options)
    assert ["orders#one"] == [view["key"] for view in listed.lines()]
    assert "" == listed.err.replace("1 record\n", "")
    assert {"ok": 1} == cli("records", "get", "--json", "--data", *options, "orders#one").json()[
        "result"
    ]


# --- records get / delete ------------------------------------------------------------------------


def test_get_shows_the_decoded_result_and_times(
    cli: Any, on_table: list[str], seeded: dict[str, IdempotencyRecord]
) -> None:
    """get decodes the result and shows ISO-8601 times with what remains."""
    expiry_s = seeded["completed"].expiry_timestamp
    assert expiry_s is not None
    started = SYSTEM_CLOCK.now_ms()
    run = cli("records", "get", "--data", *on_table, "orders#done")
    assert 0 == run.code
    assert SECRET in run.out
    assert "COMPLETED" in run.out
    expires = next(line for line in run.out.splitlines() if line.startswith("expires"))
    assert any(
        f"Z ({relative(seconds * 1000)})" in expires
        for seconds in seconds_left(expiry_s * 1000, started, SYSTEM_CLOCK.now_ms())
    )

    started = SYSTEM_CLOCK.now_ms()
    shown = cli("records", "get", "--json", "--data", *on_table, "orders#done").json()
    assert {"card": SECRET} == shown["result"]
    assert shown["expires_at"].endswith("Z")
    assert shown["expires_in_seconds"] in seconds_left(
        expiry_s * 1000, started, SYSTEM_CLOCK.now_ms()
    )
    assert shown["expires_in_seconds"] <= 3600

    hidden = cli("records", "get", "--no-data", *on_table, "orders#done")
    assert SECRET not in hidden.out


def seconds_left(end_ms: int, started_ms: int, ended_ms: int) -> range:
    """Return the whole seconds left until ``end_ms`` as seen at some instant of a command
    that ran from ``started_ms`` to ``ended_ms``: exact however long a loaded machine made it."""
    return range((end_ms - ended_ms) // 1000, (end_ms - started_ms) // 1000 + 1)


def test_get_decodes_compressed_results_and_lease(
    cli: Any, on_table: list[str], dynamodb_store: DynamoDBPersistenceLayer
) -> None:
    """A large (zlib, binary) result is shown decoded; an IN_PROGRESS record shows its lease."""
    big = {"rows": ["x" * 100] * 200}
    seed(dynamodb_store, "orders#big", result=json.dumps(big))
    claim = seed(dynamodb_store, "orders#running")
    assert (
        big == cli("records", "get", "--json", "--data", *on_table, "orders#big").json()["result"]
    )

    lease_ms = claim.in_progress_expiry_timestamp
    assert lease_ms is not None
    started = SYSTEM_CLOCK.now_ms()
    running = cli("records", "get", "--json", "--data", *on_table, "orders#running").json()
    ended = SYSTEM_CLOCK.now_ms()
    assert ("IN_PROGRESS", False) == (running["status"], running["stuck"])
    assert (
        (lease_ms - ended) / 1000
        <= running["lease_remaining_seconds"]
        <= (lease_ms - started) / 1000
    )
    assert running["lease_remaining_seconds"] <= 600
    assert running["result"] is None


def test_get_of_a_missing_key_exits_1(cli: Any, on_table: list[str]) -> None:
    """An unknown key is one line on stderr and exit code 1."""
    run = cli("records", "get", *on_table, "orders#nope")
    assert (1, "") == (run.code, run.out)
    assert ["idempotent-lambda: error: no record with key 'orders#nope'"] == run.err.splitlines()


def test_delete_refuses_a_live_in_progress_record_unless_forced(
    cli: Any,
    on_table: list[str],
    seeded: dict[str, IdempotencyRecord],
    dynamodb_store: DynamoDBPersistenceLayer,
) -> None:
    """Completed and stuck records are deleted; a live claim needs --force; missing exits 1."""
    done = cli("records", "delete", *on_table, "orders#done")
    assert 0 == done.code
    assert "use_local_cache=True may replay this result" in done.err
    assert dynamodb_store.get("orders#done") is None
    assert 0 == cli("records", "delete", *on_table, "orders#stuck").code

    refused = cli("records", "delete", *on_table, "orders#live")
    assert 2 == refused.code
    assert "live lease" in refused.err
    assert dynamodb_store.get("orders#live") is not None

    forced = cli("records", "delete", "--json", "--force", "--yes", *on_table, "orders#live")
    assert {"deleted": True} == {"deleted": forced.json()["deleted"]}
    assert "IN_PROGRESS" == forced.json()["record"]["status"]
    assert dynamodb_store.get("orders#live") is None

    assert 1 == cli("records", "delete", *on_table, "orders#live").code


class _Terminal:
    """A stdin that is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("terminal", "answer", "deleted"), [(False, "", False), (True, "n", False), (True, "y", True)]
)
def test_a_forced_delete_of_a_live_claim_asks_first(
    cli: Any,
    on_table: list[str],
    seeded: dict[str, IdempotencyRecord],
    dynamodb_store: DynamoDBPersistenceLayer,
    monkeypatch: pytest.MonkeyPatch,
    terminal: bool,
    answer: str,
    deleted: bool,
) -> None:
    """--force alone asks on a terminal, and refuses without one; only "y" deletes."""
    asked: list[str] = []
    if terminal:
        monkeypatch.setattr(sys, "stdin", _Terminal())
    monkeypatch.setattr("builtins.input", lambda question: asked.append(question) or answer)
    run = cli("records", "delete", "--force", *on_table, "orders#live")
    assert (0 if deleted else 2) == run.code
    assert deleted == (dynamodb_store.get("orders#live") is None)
    assert (1 if terminal else 0) == len(asked)
    assert "--yes" in run.err or deleted
    assert 0 == cli("records", "delete", "--force", *on_table, "orders#stuck").code  # no question


def test_get_escapes_control_and_bidi_characters(
    cli: Any, on_table: list[str], dynamodb_store: DynamoDBPersistenceLayer
) -> None:
    """A key or result holding terminal escapes or bidi overrides is shown escaped, not obeyed."""
    key = "orders#\x1b]0;pwned\x07\u202eevil"
    seed(dynamodb_store, key, result=json.dumps({"note": "\x9b31m\u2066x\u2069\x7f"}))
    run = cli("records", "get", "--data", *on_table, key)
    assert 0 == run.code
    shown = run.out
    for raw in ("\x1b", "\x07", "\u202e", "\x9b", "\u2066", "\u2069", "\x7f"):
        assert raw not in shown
    assert "\\x1b]0;pwned\\x07\\u202eevil" in shown
    assert "\\x9b31m\\u2066x\\u2069\\x7f" in shown
    listed = cli("records", "list", *on_table).out
    assert "\x1b" not in listed
    assert "\\u202e" in listed


# --- records release-stuck -----------------------------------------------------------------------


def test_release_stuck_is_a_dry_run_by_default(
    cli: Any,
    on_table: list[str],
    seeded: dict[str, IdempotencyRecord],
    dynamodb_store: DynamoDBPersistenceLayer,
) -> None:
    """Without --yes, stuck records are listed and nothing is deleted."""
    run = cli("records", "release-stuck", *on_table)
    assert 0 == run.code
    assert "orders#stuck" in run.out
    assert "orders#live" not in run.out
    assert "dry run: 1 stuck record would be released" in run.err
    assert dynamodb_store.get("orders#stuck") is not None


def test_release_stuck_deletes_only_records_whose_lease_passed(
    cli: Any,
    on_table: list[str],
    seeded: dict[str, IdempotencyRecord],
    dynamodb_store: DynamoDBPersistenceLayer,
) -> None:
    """--yes deletes stuck records; live claims and completed records are untouched."""
    run = cli("records", "release-stuck", "--json", "--yes", *on_table)
    assert 0 == run.code
    assert [(False, "orders#stuck", True)] == [
        (line["dry_run"], line["key"], line["released"]) for line in run.lines()
    ]
    assert dynamodb_store.get("orders#stuck") is None
    for key in ("orders#live", "orders#done", "refunds#old"):
        assert dynamodb_store.get(key) is not None


def test_release_never_touches_an_owner_that_claimed_since_the_scan(
    dynamodb_store: DynamoDBPersistenceLayer,
) -> None:
    """The delete is fenced on the owner seen by the scan: a new live owner survives."""
    now = SYSTEM_CLOCK.now_ms()
    seen = seed(dynamodb_store, "orders#race", lease=now - 120_000, owner="crashed")
    taken_over = IdempotencyRecord(
        idempotency_key="orders#race",
        status=Status.IN_PROGRESS,
        expiry_timestamp=now // 1000 + 3600,
        in_progress_expiry_timestamp=now + 600_000,
        owner="new-owner",
    )
    assert dynamodb_store.claim(taken_over, now_ms=now, lease_cutoff_ms=now - 1000).claimed

    assert not dynamodb_store.release_if_stuck(seen, cutoff_ms=now - 1000)
    current = dynamodb_store.get("orders#race")
    assert current is not None
    assert "new-owner" == current.owner


def test_release_of_a_stale_snapshot_whose_lease_was_extended_is_refused(
    dynamodb_store: DynamoDBPersistenceLayer,
) -> None:
    """Even with the same owner, a lease that is live at delete time is not released."""
    now = SYSTEM_CLOCK.now_ms()
    record = seed(dynamodb_store, "orders#same", lease=now + 600_000, owner="o")
    assert not dynamodb_store.release_if_stuck(record, cutoff_ms=now)
    assert dynamodb_store.get("orders#same") is not None


# --- key and the decorators, end to end -----------------------------------------------------------


def test_key_finds_the_record_a_handler_wrote(
    cli: Any, on_table: list[str], dynamodb_store: DynamoDBPersistenceLayer, tmp_path: Path
) -> None:
    """The key printed for an event is the one ``@idempotent`` stored in the table."""
    config = IdempotencyConfig(event_key_jmespath="powertools_json(body).order_id")

    @idempotent(persistence_store=dynamodb_store, config=config, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": 201}

    event = {"body": json.dumps({"order_id": 42})}
    handler(event, None)
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event), encoding="utf-8")

    key = cli("key", "--prefix", "orders", "--jmespath", config.event_key_jmespath, str(path))
    shown = cli("records", "get", "--json", "--data", *on_table, key.out.strip())
    assert 0 == shown.code
    assert {"statusCode": 201} == shown.json()["result"]


# --- create-table --------------------------------------------------------------------------------


def test_create_table_sets_key_schema_and_ttl(
    cli: Any, dynamodb_endpoint: str, dynamodb_client: DynamoDBClient
) -> None:
    """create-table makes an on-demand table with TTL; running it again is harmless."""
    options = ["--table", "cli-created", "--endpoint-url", dynamodb_endpoint]
    try:
        first = cli("create-table", *options)
        assert 0 == first.code
        assert "table cli-created created: partition key id, TTL on expiration" in first.out
        again = cli("create-table", "--json", *options)
        assert {
            "created": False,
            "partition_key": "id",
            "sort_key": None,
            "ttl_attribute": "expiration",
        }.items() <= again.json().items()
        assert "already exists" in cli("create-table", *options).out
        assert 0 == cli("records", "list", *options).code

        other = cli("create-table", *options, "--key-attr", "pk")
        assert "differs" in other.err
    finally:
        dynamodb_client.delete_table(TableName="cli-created")


# --- errors --------------------------------------------------------------------------------------


def test_a_missing_table_names_the_endpoint_of_aws_endpoint_url(
    cli: Any, dynamodb_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With AWS_ENDPOINT_URL set, a missing table is not reported "not found at AWS"."""
    monkeypatch.delenv("AWS_ENDPOINT_URL_DYNAMODB", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", dynamodb_endpoint)
    run = cli("records", "list", "--table", "no-such-table")
    assert 2 == run.code
    assert f"not found at {dynamodb_endpoint}" in run.err


def test_missing_table_is_one_line(cli: Any, dynamodb_endpoint: str) -> None:
    """A table that does not exist gives exit 2 and one line naming it."""
    run = cli("records", "list", "--table", "no-such-table", "--endpoint-url", dynamodb_endpoint)
    assert (2, "") == (run.code, run.out)
    (line,) = run.err.splitlines()
    assert f"table 'no-such-table' not found at {dynamodb_endpoint}" in line


def test_unreachable_endpoint_is_one_line(cli: Any) -> None:
    """An endpoint nobody listens on gives exit 2 and one line."""
    run = cli("records", "get", "--table", "t", "--endpoint-url", "http://127.0.0.1:9", "k")
    assert 2 == run.code
    (line,) = run.err.splitlines()
    assert "cannot reach DynamoDB at http://127.0.0.1:9" in line


def test_missing_credentials_are_one_line(
    cli: Any, dynamodb_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No credentials anywhere gives exit 2 and a line saying how to provide them."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    run = cli("records", "list", "--table", "t", "--endpoint-url", dynamodb_endpoint)
    assert 2 == run.code
    (line,) = run.err.splitlines()
    assert "no usable AWS credentials" in line


def test_unknown_profile_is_one_line(cli: Any, dynamodb_endpoint: str) -> None:
    """A profile that does not exist gives exit 2 and one line."""
    run = cli("records", "list", "--table", "t", "--profile", "nope")
    assert 2 == run.code
    assert "nope" in run.err
    assert 1 == len(run.err.splitlines())


def test_python_dash_m_runs_the_cli() -> None:
    """``python -m idempotent_lambda --help`` works as a separate process."""
    done = subprocess.run(
        [sys.executable, "-m", "idempotent_lambda", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert 0 == done.returncode
    assert "records" in done.stdout
    assert "create-table" in done.stdout


def test_records_without_a_lease_end_are_stuck_only_once_expired(
    cli: Any, on_table: list[str], idempotency_table: str, dynamodb_client: DynamoDBClient
) -> None:
    """An IN_PROGRESS item with no lease end is live until its expiration, then released."""
    now_s = SYSTEM_CLOCK.now_ms() // 1000
    for key, expiry in (("old#gone", now_s - 60), ("old#live", now_s + 3600)):
        dynamodb_client.put_item(
            TableName=idempotency_table,
            Item={
                "id": {"S": key},
                "status": {"S": "IN_PROGRESS"},
                "expiration": {"N": str(expiry)},
                "owner": {"S": "o"},
            },
        )
    run = cli("records", "release-stuck", "--json", "--yes", *on_table)
    assert ["old#gone"] == [line["key"] for line in run.lines() if line["released"]]
    assert ["old#live"] == [v["key"] for v in cli("records", "list", "--json", *on_table).lines()]
