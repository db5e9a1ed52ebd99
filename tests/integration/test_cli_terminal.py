"""The operator CLI as a person sees it: run on a pseudo-terminal, read back as a screen."""

from __future__ import annotations

import fcntl
import http.client
import http.server
import os
import select
import struct
import subprocess
import sys
import termios
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from idempotent_lambda import DynamoDBPersistenceLayer
from tests.integration._crafted_aws import CraftedAws
from tests.integration.test_cli_doctor_answers import HOSTILE, SHOWN, UNSAFE
from tests.integration.test_cli_operator import seed

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = 60
#: Generous: how long a loaded machine may take to show what the test waits for.
DEADLINE_S = 60.0


class HeldScan:
    """A proxy to the DynamoDB server that holds back every Scan after the first page."""

    def __init__(self, upstream: str) -> None:
        self.release = threading.Event()
        self.holding = threading.Event()
        target = urlsplit(upstream)
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if b"ExclusiveStartKey" in body:
                    proxy.holding.set()
                    proxy.release.wait(DEADLINE_S)
                upstream = http.client.HTTPConnection(target.hostname, target.port)
                upstream.request("POST", self.path, body, dict(self.headers))
                answer = upstream.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in ("content-length", "connection", "transfer-encoding"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def held_scan(dynamodb_endpoint: str) -> Iterator[HeldScan]:
    """Yield a proxy that holds back the second page of a scan until released."""
    proxy = HeldScan(dynamodb_endpoint)
    thread = threading.Thread(target=proxy.server.serve_forever, daemon=True)
    thread.start()
    yield proxy
    proxy.release.set()
    proxy.server.shutdown()
    proxy.server.server_close()


class Terminal:
    """A command running on a pseudo-terminal of `columns` columns, and what it printed."""

    def __init__(self, *argv: str, columns: int = COLUMNS) -> None:
        master, child = os.openpty()
        fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        env |= {"PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8", "TERM": "xterm"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "idempotent_lambda", *argv],
            stdin=child,
            stdout=child,
            stderr=child,
            env=env,
        )
        os.close(child)
        self._master = master
        self.raw = ""

    def read_until(self, done: Any) -> bool:
        """Read output until `done(screen)` holds or the command ends; tell whether it held."""
        while not done(self.screen()):
            ready, _, _ = select.select([self._master], [], [], DEADLINE_S)
            try:
                chunk = os.read(self._master, 65536) if ready else b""
            except OSError:  # the command ended and closed the terminal
                chunk = b""
            if not chunk:
                return bool(done(self.screen()))
            self.raw += chunk.decode("utf-8")
        return True

    def finish(self) -> int:
        """Read everything the command prints; return its exit code."""
        self.read_until(lambda screen: False)
        os.close(self._master)
        return self.process.wait(DEADLINE_S)

    def screen(self) -> list[str]:
        """Return the lines the terminal shows: carriage returns and erased lines applied."""
        lines: list[list[str]] = [[]]
        column = 0
        text = self.raw.replace("\x1b[K", "\x00")
        for char in text:
            if char == "\x00":
                del lines[-1][column:]
            elif char == "\r":
                column = 0
            elif char == "\n":
                lines.append([])
                column = 0
            else:
                line = lines[-1]
                line[column : column + 1] = [char]
                column += 1
        return ["".join(line) for line in lines]


def test_rows_stream_fit_the_width_and_progress_never_mixes_in(
    held_scan: HeldScan, idempotency_table: str, dynamodb_store: DynamoDBPersistenceLayer
) -> None:
    """A row shows while the scan is still reading; the progress line is gone when rows follow.

    Keys are wider than the 60-column terminal: they are cut in their middle, first.
    """
    keys = [f"orders#{n}" + "0123456789abcdef" * 4 for n in range(3)]
    for key in keys:
        seed(dynamodb_store, key, result='{"ok":1}')
    terminal = Terminal(
        "records",
        "list",
        "--page-size",
        "1",
        "--table",
        idempotency_table,
        "--endpoint-url",
        held_scan.url,
    )

    shown_early = terminal.read_until(lambda screen: screen[-1].startswith("scanning: "))
    early = terminal.screen()
    still_scanning = held_scan.holding.wait(DEADLINE_S) and terminal.process.poll() is None
    held_scan.release.set()
    code = terminal.finish()

    assert (True, True) == (shown_early, still_scanning)
    assert "KEY" == early[0].split()[0]
    assert early[1].startswith("orders#")
    assert "scanning: 1 items read, 1 match" == early[-1]
    screen = [line for line in terminal.screen() if line]
    assert 0 == code
    assert "KEY" == screen[0].split()[0]
    rows = screen[1:4]
    heads_tails = [row.split()[0].split("…") for row in rows]
    assert sorted(keys) == sorted(
        k for head, tail in heads_tails for k in keys if k.startswith(head) and k.endswith(tail)
    )
    assert all(row.split()[1] == "COMPLETED" for row in rows)
    assert [
        "keys cut to fit the terminal: --json or a pipe prints them whole",
        "scanned 3 items",
        "3 records",
    ] == [line.split(" in ")[0] for line in screen[4:]]
    assert all(len(line) <= COLUMNS for line in screen[:4])  # the header and the rows
    assert "scanning" in terminal.raw
    assert not any("scanning" in line for line in screen)


def logical(lines: list[str]) -> list[str]:
    """Join the lines doctor wrapped to the terminal back into one line per check or fix."""
    joined: list[str] = []
    for line in lines:
        if joined and line.startswith("      ") and not line.startswith("      fix: "):
            joined[-1] += " " + line.strip()
        else:
            joined.append(line)
    return joined


@pytest.mark.parametrize("columns", [80, 130])
def test_doctor_wraps_to_the_terminal_under_its_own_text(
    crafted_aws: CraftedAws, columns: int
) -> None:
    """Each check and fix wraps inside the terminal, indented under its own text."""
    crafted_aws.answers["GetFunctionConfiguration"]["Role"] = "arn:aws:iam::1:role/orders-api"
    table = crafted_aws.answers["DescribeTable"]["Table"]
    table["Replicas"] = [{"RegionName": "eu-west-1"}, {"RegionName": "us-west-2"}]
    terminal = Terminal(
        "doctor",
        "--table",
        "crafted",
        "--endpoint-url",
        crafted_aws.url,
        "--function",
        "f",
        columns=columns,
    )
    code = terminal.finish()
    lines = [line for line in terminal.screen() if line.strip()]

    assert 0 == code
    assert all(len(line) <= columns for line in lines)
    whole = logical(lines)
    assert ["ok"] * 5 + ["warn", "fix:", "ok"] == [line.split()[0] for line in whole]
    assert any(len(line) > columns for line in whole)  # so some were wrapped
    assert all(line.startswith(("ok    ", "warn  ", "      ")) for line in lines)


def test_doctor_reads_one_line_per_check_with_its_fix(
    idempotency_table: str, dynamodb_endpoint: str
) -> None:
    """On a terminal: a status word, the check and what it found; the fix indented below."""
    terminal = Terminal("doctor", "--table", idempotency_table, "--endpoint-url", dynamodb_endpoint)
    code = terminal.finish()
    lines = logical([line for line in terminal.screen() if line.strip()])

    assert 0 == code
    checks = [line for line in lines if not line.startswith(" ")]
    assert ["ok", "ok", "warn", "warn", "ok", "ok"] == [line.split()[0] for line in checks]
    assert all(line.startswith("      fix: ") for line in lines if line.startswith(" "))
    assert 2 == sum(line.startswith("      fix: ") for line in lines)


def test_doctor_shows_hostile_answers_as_text(crafted_aws: CraftedAws) -> None:
    """A replica's Region and a function's role holding escape sequences and a bidi override
    are shown written out, on the lines doctor printed them: nothing retitles or clears it."""
    table = crafted_aws.answers["DescribeTable"]["Table"]
    table["Replicas"] = [{"RegionName": HOSTILE}, {"RegionName": "us-west-2"}]
    crafted_aws.answers["GetFunctionConfiguration"]["Role"] = f"arn:aws:iam::1:role/{HOSTILE}"
    terminal = Terminal(
        "doctor", "--table", "crafted", "--endpoint-url", crafted_aws.url, "--function", "f"
    )
    code = terminal.finish()
    lines = logical([line for line in terminal.screen() if line.strip()])

    assert (0, None) == (code, UNSAFE.search(terminal.raw.replace("\r\n", "\n")))
    checks = [line.split()[:2] for line in lines if not line.startswith(" ")]
    assert ["warn", "global"] == checks[5]
    assert ["ok", "permissions:"] == checks[6]
    assert SHOWN in lines[5]  # the global table's line; its fix follows
    assert lines[6].startswith("      fix: ")
    assert f"role/{SHOWN} may" in lines[7]
