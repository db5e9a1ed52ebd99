"""The operator CLI without a table: ``key``, argument handling, error lines, formatting."""

from __future__ import annotations

import decimal
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import (
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
)

from idempotent_lambda import IdempotencyConfig, InMemoryPersistenceLayer, idempotent
from idempotent_lambda.cli import main
from idempotent_lambda.cli._main import explain
from idempotent_lambda.cli._output import (
    escape_text,
    iso,
    jsonable,
    layout,
    relative,
    render,
    to_json,
)
from idempotent_lambda.cli._records import KEY_FIRST, LIST_HEADERS
from tests.unit._doubles import Decisions, SpyStore


@dataclass
class Run:
    """What one CLI run returned and printed."""

    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Any:
    """Return ``run(*argv) -> Run``, calling ``main`` in-process."""

    def run(*argv: str) -> Run:
        code = main(list(argv))
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run


def write_event(tmp_path: Path, event: Any) -> str:
    """Write ``event`` as JSON and return its path."""
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event), encoding="utf-8")
    return str(path)


def decorated_key(store: Any, event: Any, config: IdempotencyConfig, **options: Any) -> Any:
    """Run an ``@idempotent`` handler on ``event`` and return the record it claimed."""
    spy = SpyStore(store)

    @idempotent(persistence_store=spy, config=config, **options)
    def handler(event: Any, context: Any) -> str:
        return "done"

    handler(event, None)
    return spy.claims[-1]


API_EVENT = {
    "httpMethod": "POST",
    "body": json.dumps({"order_id": 7, "amount": 10.0, "note": "é"}),
    "headers": {"X-Request-Id": "abc"},
}


@pytest.mark.parametrize(
    ("jmespath", "validation", "hash_name"),
    [
        ("", "", "sha256"),
        ("powertools_json(body).order_id", "", "sha256"),
        ("powertools_json(body).[order_id, note]", "powertools_json(body).amount", "sha256"),
        ("headers", "", "md5"),
    ],
)
def test_key_equals_what_the_decorator_computes(
    cli: Any,
    tmp_path: Path,
    idempotency_store: InMemoryPersistenceLayer,
    jmespath: str,
    validation: str,
    hash_name: str,
) -> None:
    """The printed key and validation hash are those ``@idempotent`` stores for the event."""
    config = IdempotencyConfig(
        event_key_jmespath=jmespath,
        payload_validation_jmespath=validation,
        hash_function=hash_name,
    )
    claimed = decorated_key(idempotency_store, API_EVENT, config, key_prefix="orders")
    argv = ["key", "--prefix", "orders", "--jmespath", jmespath, "--hash", hash_name]
    if validation:
        argv += ["--validation-jmespath", validation]

    run = cli(*argv, "--json", write_event(tmp_path, API_EVENT))

    assert 0 == run.code
    assert {"key": claimed.idempotency_key, "validation_hash": claimed.payload_hash} == json.loads(
        run.out
    )


def test_key_plain_output_is_just_the_key(
    cli: Any, tmp_path: Path, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """Without --json and without validation, stdout is the key alone (for $(...) in scripts)."""
    claimed = decorated_key(
        idempotency_store, {"id": 1}, IdempotencyConfig(event_key_jmespath="id"), key_prefix="p"
    )
    run = cli("key", "--prefix", "p", "--jmespath", "id", write_event(tmp_path, {"id": 1}))
    assert (0, claimed.idempotency_key + "\n") == (run.code, run.out)


def _handler_for_default_prefix(event: Any, context: Any) -> str:
    return "done"


def test_key_with_handler_uses_the_default_prefix(
    cli: Any,
    tmp_path: Path,
    idempotency_store: InMemoryPersistenceLayer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--handler MODULE:QUALNAME with --function-name gives the deployed function's default key."""
    decisions = Decisions()
    config = IdempotencyConfig(decision_hook=decisions)
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "orders-prod")
    idempotent(persistence_store=idempotency_store, config=config)(_handler_for_default_prefix)(
        {"a": 1}, None
    )
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME")
    target = f"{_handler_for_default_prefix.__module__}:{_handler_for_default_prefix.__qualname__}"

    run = cli(
        "key",
        "--handler",
        target,
        "--function-name",
        "orders-prod",
        write_event(tmp_path, {"a": 1}),
    )

    assert (0, f"{decisions.last.key}\n") == (run.code, run.out)
    assert "AWS_LAMBDA_FUNCTION_NAME" not in os.environ


def test_key_reads_stdin(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``-`` reads the event from stdin."""
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO('{"id": 1}'))
    run = cli("key", "--prefix", "p", "--jmespath", "id", "-")
    assert 0 == run.code
    assert run.out.startswith("p#")


def test_key_without_key_material_exits_1(cli: Any, tmp_path: Path) -> None:
    """An expression that finds nothing is explained on stderr, with exit code 1."""
    run = cli("key", "--prefix", "p", "--jmespath", "missing", write_event(tmp_path, {"a": 1}))
    assert (1, "") == (run.code, run.out)
    assert 1 == len(run.err.splitlines())
    assert "finds nothing" in run.err

    run = cli("key", "--json", "--prefix", "p", "--jmespath", "x", write_event(tmp_path, {}))
    assert 1 == run.code
    assert json.loads(run.out)["key"] is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["key", "--prefix", "p", "--jmespath", "a[", "EVENT"], "not valid JMESPath"),
        (["key", "--prefix", "p", "--hash", "nope", "EVENT"], "not available"),
        (["key", "--prefix", "p", "/no/such/file.json"], "cannot read"),
        (["key", "--prefix", "p", "NOT_JSON"], "is not JSON"),
        (["key", "--handler", "nocolon", "EVENT"], "MODULE:QUALNAME"),
    ],
)
def test_key_errors_are_one_line_with_exit_2(
    cli: Any, tmp_path: Path, argv: list[str], message: str
) -> None:
    """Bad expressions, hashes and files give one line on stderr and exit code 2."""
    event = write_event(tmp_path, {"a": 1})
    bad = tmp_path / "bad.json"
    bad.write_text("{nope", encoding="utf-8")
    argv = [event if a == "EVENT" else str(bad) if a == "NOT_JSON" else a for a in argv]
    run = cli(*argv)
    assert 2 == run.code
    (line,) = run.err.splitlines()
    assert line.startswith("idempotent-lambda: error: ")
    assert message in line


def test_usage_errors_and_help(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A usage error exits 2 with argparse's message; --help exits 0."""
    monkeypatch.delenv("IDEMPOTENCY_TABLE", raising=False)
    run = cli("records", "list")
    assert 2 == run.code
    assert "--table" in run.err
    run = cli("--help")
    assert 0 == run.code
    assert "records" in run.out
    assert 2 == cli("records", "list", "--table", "t", "--page-size", "0").code


def test_unexpected_errors_are_one_line_unless_debug(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug shows as one line; --debug shows the traceback instead."""

    def broken(args: Any, screen: Any) -> int:
        raise ZeroDivisionError("oops")

    monkeypatch.setattr("idempotent_lambda.cli._keys.compute_key", broken)
    run = cli("key", "--prefix", "p", write_event(tmp_path, {}))
    assert 2 == run.code
    assert ["idempotent-lambda: error: unexpected ZeroDivisionError: oops (run with --debug "
            "for details)"] == run.err.splitlines()  # fmt: skip
    with pytest.raises(ZeroDivisionError):
        main(["--debug", "key", "--prefix", "p", write_event(tmp_path, {})])


def _client_error(code: str, operation: str = "Scan") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"{code} message"}}, operation)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (_client_error("ResourceNotFoundException"), "table 't' not found at http://x"),
        (_client_error("UnrecognizedClientException"), "AWS rejected the credentials"),
        (_client_error("ExpiredTokenException"), "AWS rejected the credentials"),
        (_client_error("AccessDeniedException"), "access denied to Scan"),
        (_client_error("ThrottlingException"), "DynamoDB Scan failed: ThrottlingException"),
        (NoCredentialsError(), "no usable AWS credentials"),
        (NoRegionError(), "no AWS region"),
        (EndpointConnectionError(endpoint_url="http://x"), "cannot reach DynamoDB at http://x"),
    ],
)
def test_aws_errors_are_explained(exc: Exception, expected: str) -> None:
    """Each AWS failure an operator meets gets a sentence that says what to fix."""
    message = explain(exc, table="t", endpoint="http://x")
    assert message is not None
    assert expected in message


def test_other_errors_are_not_explained() -> None:
    """Exceptions that are not AWS or library errors are left to the generic line."""
    assert explain(ValueError("x"), table=None, endpoint=None) is None


def test_formatting_helpers() -> None:
    """Times are ISO-8601 UTC, durations readable, results plain JSON, tables aligned."""
    assert "2026-01-01T00:00:00Z" == iso(1_767_225_600_000, seconds_only=True)
    assert "2026-01-01T00:00:00.250Z" == iso(1_767_225_600_250)
    assert iso(None) is None
    assert ["in 1m 5s", "2h 3m ago", "in 0s", "-"] == [
        relative(65_000),
        relative(-(2 * 3600 + 180) * 1000),
        relative(0),
        relative(None),
    ]
    value = {
        "d": decimal.Decimal("1.10"),
        "x": decimal.Decimal("0.1"),
        "n": decimal.Decimal("7"),
        "b": b"\x00",
        (1, 2): {3},
    }
    expected = {"d": "1.10", "x": 0.1, "n": 7, "b": "base64:AA==", "(1, 2)": [3]}
    assert expected == jsonable(value)
    widths = layout(["A", "BB"], [["ccc", "d"]], width=None)
    assert "A    BB\nccc  d" == "\n".join(
        render(line, widths, clip=False) for line in (["A", "BB"], ["ccc", "d"])
    )


@pytest.mark.parametrize("width", [80, 100, 130])
def test_tables_fit_a_terminal_by_cutting_the_key_before_the_status_lease_and_times(
    width: int,
) -> None:
    """From 80 to 130 columns a long key is cut in its middle; the rest is shown whole."""
    key = "fn-orders-prod.orders.handler.create_order#" + "0123456789abcdef" * 4
    rows = [
        [key, "IN_PROGRESS", "in 59m 59s", "STUCK, ended 14m 59s ago", "0123abcd"],
        ["short#1", "COMPLETED", "in 1h", "-", "-"],
    ]
    widths = layout(list(LIST_HEADERS), rows, width=width, cut=KEY_FIRST)
    lines = [render(r, widths, clip=True, middle=(0,)) for r in rows]

    assert all(len(line) <= width for line in lines)
    for whole in rows[0][1:4] + rows[1][1:3]:  # status, expiry and lease
        assert whole in "\n".join(lines)
    head, tail = lines[0].split()[0].split("…")
    assert key.startswith(head)
    assert head.startswith("fn-orders-")
    assert key.endswith(tail)
    assert len(tail) >= 6


def test_piped_tables_and_wide_terminals_keep_every_value_whole() -> None:
    """No width (a pipe), or room enough: nothing is cut."""
    key = "orders#" + "ab" * 32
    rows = [[key, "COMPLETED", "in 1h", "-", "-"]]
    for width in (None, 200):
        widths = layout(list(LIST_HEADERS), rows, width=width, cut=KEY_FIRST)
        assert key == render(rows[0], widths, clip=True, middle=(0,)).split()[0]


def test_unsafe_characters_are_escaped_in_text_and_in_json() -> None:
    """Text shows controls and bidi marks as escapes; JSON escapes them and decodes back."""
    hostile = "a\x1b[2J\n\x9b\x7f\u202e\u2066\u200f\u2028é"
    assert "a\\x1b[2J\\x0a\\x9b\\x7f\\u202e\\u2066\\u200f\\u2028é" == escape_text(hostile)
    encoded = to_json({"k": hostile})
    assert encoded.isprintable()
    assert "é" in encoded
    assert {"k": hostile} == json.loads(encoded)


def test_help_examples_have_no_stray_spaces(capsys: pytest.CaptureFixture[str]) -> None:
    """Each example of `--help` is a line as typed: no run of spaces inside it."""
    main(["--help"])
    examples = capsys.readouterr().out.split("examples:", 1)[1]
    assert [] == [line for line in examples.splitlines() if "   " in line.strip()]
