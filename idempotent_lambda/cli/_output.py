"""What the operator sees: records, safe text and JSON, the progress line, streamed tables.

Stored keys and results come from requests. A value holding an escape sequence could rewrite
the operator's terminal, and bidi controls can make a key read as another, so every value
printed goes through `escape_text` (tables, text) or `to_json` (`--json`).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import re
import shutil
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from idempotent_lambda.persistence.dynamodb._operator import IN_PROGRESS_SPELLINGS
from idempotent_lambda.persistence.dynamodb._record_view import RecordView
from idempotent_lambda.record import IdempotencyRecord, Status

OK, NOT_FOUND, ERROR, INTERRUPTED = 0, 1, 2, 130
#: Seconds between two updates of the progress line.
PROGRESS_INTERVAL_S = 1.0
# C0 controls (newline too), DEL, C1 controls, the bidi controls and the line separators.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
_ERASE_LINE = "\r\033[K"


#: How a doctor finding stands (``OK`` is taken: the exit code).
OK_CHECK, WARN, FAIL = "ok", "warn", "fail"


@dataclass(frozen=True)
class Check:
    """One doctor finding: what was checked, how it stands, and what to do about it."""

    check: str
    status: str
    detail: str
    fix: str | None = None


class CliError(Exception):
    """A failure to report as one line, with its exit code."""

    def __init__(self, message: str, exit_code: int = ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def escape_text(text: str) -> str:
    """Return `text` with unsafe characters written as `\\x1b` or `\\u202e`."""
    return _UNSAFE.sub(lambda m: f"\\x{ord(m[0]):02x}" if m[0] <= "\xff" else _u(m), text)


def to_json(value: Any) -> str:
    """Return `value` as one line of JSON, unsafe characters as `\\u` escapes (same JSON value)."""
    return _UNSAFE.sub(_u, json.dumps(value, ensure_ascii=False))


def _u(match: re.Match[str]) -> str:
    return f"\\u{ord(match[0]):04x}"


class Screen:
    """Where a command prints: data on stdout; notes and the progress line on stderr.

    The progress line is drawn only when stderr is a terminal, and erased before anything else
    is printed, so it never mixes with data or notes.
    """

    def __init__(self, *, quiet: bool = False) -> None:
        self._live = not quiet and sys.stderr.isatty()
        self._drawn = False
        self._next_draw = 0.0

    def out(self, text: str) -> None:
        """Print `text` (already escaped) on stdout."""
        self.erase()
        print(text, flush=True)

    def width(self) -> int | None:
        """Return the terminal's width when stdout is one, else None (piped: lines stay whole)."""
        return shutil.get_terminal_size().columns if sys.stdout.isatty() else None

    def json(self, value: Any) -> None:
        """Print `value` as one JSON line on stdout."""
        self.out(to_json(value))

    def note(self, text: str) -> None:
        """Print a line for the person on stderr: summaries, warnings, errors."""
        self.erase()
        print(escape_text(text), file=sys.stderr, flush=True)

    def progress(self, text: str) -> None:
        """Draw `text` as the progress line: on a terminal, at most once per interval."""
        now = time.monotonic()
        if self._live and now >= self._next_draw:
            self._next_draw = now + PROGRESS_INTERVAL_S
            width = shutil.get_terminal_size().columns - 1  # a wrapped line cannot be erased
            sys.stderr.write(_ERASE_LINE + text[:width])
            sys.stderr.flush()
            self._drawn = True

    def erase(self) -> None:
        """Erase the progress line, if one is drawn."""
        if self._drawn:
            sys.stderr.write(_ERASE_LINE)
            sys.stderr.flush()
            self._drawn = False


class Rows:
    """A table printed as its rows come, in columns sized by the first batch.

    On a terminal the columns fit its width. The columns named in `cut` give way first, in
    that order, down to a floor; a cell wider than its column is cut with `…` (a key in its
    middle, so both its prefix and the end of its digest stay readable). The other columns
    shrink only when that is not enough. Piped output and `--json` keep every value whole.
    """

    def __init__(
        self,
        screen: Screen,
        headers: Sequence[str],
        *,
        cut: Sequence[int] = (),
        middle: int | None = None,
    ) -> None:
        self._screen = screen
        self._headers = headers
        self._cut = cut
        self._middle = () if middle is None else (middle,)
        self._widths: list[int] = []
        self._clip = sys.stdout.isatty()
        #: Whether a cell of a `middle` column was cut (the caller says where to see it whole).
        self.cut_middle = False

    def add(self, rows: Sequence[Sequence[str]]) -> None:
        """Print `rows`, after the header when they are the first."""
        cells = [[escape_text(cell) for cell in row] for row in rows]
        if cells and not self._widths:
            width = self._screen.width()
            self._widths = layout(self._headers, cells, width=width, cut=self._cut)
            self._screen.out(render(self._headers, self._widths, clip=self._clip))
        for row in cells:
            if self._clip and any(len(row[i]) > self._widths[i] for i in self._middle):
                self.cut_middle = True
            self._screen.out(render(row, self._widths, clip=self._clip, middle=self._middle))


#: The narrowest a column given way first becomes before the others shrink.
CUT_FLOOR = 16


def layout(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    width: int | None,
    cut: Sequence[int] = (),
) -> list[int]:
    """Return the widths of the columns; with `width`, shrunk to fit it.

    The columns in `cut` give way first, in order, down to `CUT_FLOOR`; then the widest of the
    others shrink, down to 4.
    """
    widths = [max(map(len, column)) for column in zip(headers, *rows, strict=True)]
    if width is None:
        return widths
    for index in cut:
        excess = sum(widths) + 2 * len(widths) - 2 - width
        if excess > 0:
            widths[index] = max(min(widths[index], CUT_FLOOR), widths[index] - excess)
    others = [i for i in range(len(widths)) if i not in cut] or list(range(len(widths)))
    while sum(widths) + 2 * len(widths) - 2 > width and max(widths[i] for i in others) > 4:
        widths[max(others, key=lambda i: widths[i])] -= 1
    return widths


def render(
    cells: Sequence[str], widths: Sequence[int], *, clip: bool, middle: Sequence[int] = ()
) -> str:
    """Return one line of a table; with `clip`, a cell wider than its column is cut with `…`.

    A column in `middle` keeps its head and tail and loses its middle; others lose their end.
    """
    if clip:
        pairs = enumerate(zip(cells, widths, strict=True))
        cells = [_fit(cell, width, i in middle) for i, (cell, width) in pairs]
    return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def _fit(cell: str, width: int, middle: bool) -> str:
    if len(cell) <= width:
        return cell
    if not middle:
        return cell[: width - 1] + "…"
    tail = min(8, (width - 1) // 3)
    return cell[: width - 1 - tail] + "…" + cell[len(cell) - tail :]


def is_stuck(record: IdempotencyRecord, cutoff_ms: int) -> bool:
    """Tell whether `record` is IN_PROGRESS with a lease that ended before `cutoff_ms`."""
    return record.status is Status.IN_PROGRESS and record.lease_passed(cutoff_ms)


def view(found: RecordView, *, now_ms: int, cutoff_ms: int, data: bool = False) -> dict[str, Any]:
    """Return what an operator sees of a record at ``now_ms``; its result only with ``data``.

    A timestamp past any calendar date makes the view ``invalid``, with no times. With
    ``data``: the decoded result as plain JSON, why it was not stored, where it was offloaded
    (not fetched), and the exact stored text (see `RecordView`).
    """
    record = found.record
    expiry_ms = None if record.expiry_timestamp is None else record.expiry_timestamp * 1000
    in_progress = record.status is Status.IN_PROGRESS
    lease_ms = record.in_progress_expiry_timestamp if in_progress else None
    invalid = None
    try:
        expires_at, lease_ends_at = iso(expiry_ms, seconds_only=True), iso(lease_ms)
    except (ValueError, OverflowError, OSError):
        expiry_ms = lease_ms = expires_at = lease_ends_at = None
        invalid = "a timestamp is out of range"
    shown: dict[str, Any] = {
        "key": record.idempotency_key,
        "status": record.effective_status(now_ms).value,
        "stored_status": found.stored_status,
        "stuck": is_stuck(record, cutoff_ms),
        "invalid": invalid,
        "expires_at": expires_at,
        "expires_in_seconds": None if expiry_ms is None else (expiry_ms - now_ms) // 1000,
        "lease_ends_at": lease_ends_at,
        "lease_remaining_seconds": None
        if lease_ms is None
        else round((lease_ms - now_ms) / 1000, 3),
        "owner": record.owner,
        "validation_hash": record.payload_hash,
    }
    if data:
        shown["result"] = jsonable(found.result)
        shown["unstorable_reason"] = found.unstorable_reason
        shown["offloaded"] = None if found.offloaded is None else dict(found.offloaded)
        shown["stored_data"] = record.response_data
    return shown


def jsonable(value: Any) -> Any:
    """Turn a decoded result into plain JSON for display (Decimal as number, bytes as base64)."""
    if isinstance(value, decimal.Decimal):  # a number when that shows it exactly, and briefly
        if value.is_finite() and int(value.as_tuple().exponent) >= 0 and value.adjusted() < 64:
            return int(value)
        as_float = float(value)
        return as_float if repr(as_float) == str(value) else str(value)
    if isinstance(value, bytes):
        return "base64:" + base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {k if isinstance(k, str) else repr(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    if isinstance(value, set | frozenset):
        return sorted((jsonable(item) for item in value), key=repr)
    return value


def row(shown: dict[str, Any]) -> list[str]:
    """Return the table row of a record view."""
    lease = shown["lease_remaining_seconds"]
    if shown["stored_status"] not in IN_PROGRESS_SPELLINGS:
        lease_text = "-"
    elif lease is None:
        lease_text = "-" if shown["invalid"] else "until expiry"
    else:
        lease_text = ("STUCK, ended " if shown["stuck"] else "") + relative(int(lease * 1000))
    expires = shown["expires_in_seconds"]
    return [
        shown["key"],
        "INVALID" if shown["invalid"] else shown["status"],
        relative(None if expires is None else expires * 1000),
        lease_text,
        (shown["owner"] or "-")[:8],
    ]


def detail(shown: dict[str, Any], *, hidden: bool) -> str:
    """Return the text of `records get`; `hidden` says a stored result was left out."""

    def when(at: str | None, seconds: float | None) -> str:
        return "-" if at is None or seconds is None else f"{at} ({relative(int(seconds * 1000))})"

    status = shown["status"]
    if status != shown["stored_status"]:
        status += f" (stored as {shown['stored_status']})"
    if shown["stuck"]:
        status += ", STUCK: lease passed"
    if shown["invalid"]:
        status += f", INVALID: {shown['invalid']}"
    lines = [
        ("key", shown["key"]),
        ("status", status),
        ("expires", when(shown["expires_at"], shown["expires_in_seconds"])),
        ("lease ends", when(shown["lease_ends_at"], shown["lease_remaining_seconds"])),
        ("owner", shown["owner"] or "-"),
        ("validation", shown["validation_hash"] or "-"),
    ]
    text = "\n".join(f"{name:<11} {escape_text(value)}" for name, value in lines)
    if hidden:
        return text + "\nresult      not shown (--data shows it)"
    if "result" not in shown:
        return text
    result = (escape_text(line) for line in _result_text(shown).split("\n"))
    return text + "\nresult      " + ("\n" + " " * 12).join(result)


def _result_text(shown: dict[str, Any]) -> str:
    if shown["unstorable_reason"] is not None:
        return f"not stored: {shown['unstorable_reason']}"
    offloaded = shown["offloaded"]
    if offloaded is not None and offloaded.get("malformed"):
        return "offloaded to S3, but the reference is malformed"
    if offloaded is not None:
        return (
            f"offloaded to S3 (not fetched): s3://{offloaded['bucket']}/{offloaded['key']}\n"
            f"{offloaded['size']} bytes, zlib-compressed, sha256 {offloaded['sha256']}"
        )
    if shown["stored_data"] is None:
        return "-"
    return json.dumps(shown["result"], indent=2, ensure_ascii=False)


def iso(epoch_ms: int | None, *, seconds_only: bool = False) -> str | None:
    """Return `epoch_ms` as ISO-8601 UTC (`...Z`); None stays None.

    Raises:
        ValueError, OverflowError, OSError: No calendar date is that far away.
    """
    if epoch_ms is None:
        return None
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.timezone.utc)
    text = moment.isoformat(timespec="seconds" if seconds_only else "milliseconds")
    return text.replace("+00:00", "Z")


def relative(delta_ms: int | None) -> str:
    """Return `"in 4m 2s"` for a future delta, `"4m 2s ago"` for a past one."""
    if delta_ms is None:
        return "-"
    seconds = abs(delta_ms) // 1000
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    units = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    first = next((i for i, (n, _) in enumerate(units) if n), len(units) - 1)
    text = " ".join(f"{n}{unit}" for n, unit in units[first : first + 2])
    return f"in {text}" if delta_ms >= 0 else f"{text} ago"


def confirm(question: str) -> bool:
    """Ask `question` on the terminal; False (without asking) when stdin is not a terminal."""
    if not sys.stdin.isatty():
        return False
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def text(check: Check, *, width: int | None = None) -> str:
    """Return the lines a person reads for ``check``, every field escaped.

    The one place where doctor's text meets the terminal: a detail quotes AWS's answers
    (attribute names, Regions, a role's ARN), which anyone who can create a table or a role
    may fill with escape sequences or bidi controls. With ``width`` (a terminal's), the check
    and its fix wrap under their own text; words such as ARNs are never broken.
    """
    line = f"{escape_text(check.status):<5} {escape_text(check.check)}: {escape_text(check.detail)}"
    lines = [_wrapped(line, width, "      ")]
    if check.fix is not None:
        lines.append(_wrapped(f"      fix: {escape_text(check.fix)}", width, " " * 11))
    return "\n".join(lines)


def _wrapped(line: str, width: int | None, indent: str) -> str:
    if width is None:
        return line
    return textwrap.fill(
        line,
        width=max(width - 1, 40),
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
