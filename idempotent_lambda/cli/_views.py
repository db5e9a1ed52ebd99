"""What the operator sees: record views, times, tables, notes, progress, and exit codes."""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from idempotent_lambda._result_codec import decode_result, unstorable_reason
from idempotent_lambda.exceptions import IdempotencyCorruptRecordError
from idempotent_lambda.persistence.dynamodb._s3 import is_reference, parse_reference
from idempotent_lambda.record import IdempotencyRecord, Status

_UTC = datetime.timezone.utc
#: Exit codes.
OK, NOT_FOUND, ERROR, INTERRUPTED = 0, 1, 2, 130
#: Seconds between two progress lines.
PROGRESS_INTERVAL_S = 1.0


class CliError(Exception):
    """A failure to report as one line, with its exit code."""

    def __init__(self, message: str, exit_code: int = ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Progress:
    """Progress of a scan on stderr: a line per interval while it runs, a summary if it paged."""

    def __init__(self, *, enabled: bool, interval_s: float = PROGRESS_INTERVAL_S) -> None:
        self.enabled = enabled
        self.interval_s = interval_s
        self.pages = self.scanned = self.matched = self.skipped = 0
        self._started = self._last = time.monotonic()
        self._tty = sys.stderr.isatty()

    def page(self, scanned: int, skipped: int) -> None:
        """Count a page that read ``scanned`` items, ``skipped`` of them not records."""
        self.pages += 1
        self.scanned += scanned
        self.skipped += skipped
        now = time.monotonic()
        if self.enabled and now - self._last >= self.interval_s:
            self._last = now
            self._print(f"scanning: {self.scanned} items read, {self.matched} match...")

    def done(self) -> None:
        """Print the summary of a multi-page scan, and how many items were not records."""
        if self._tty and self.enabled and self.pages > 1:
            sys.stderr.write("\r\033[K")
        if self.enabled and self.pages > 1:
            elapsed = time.monotonic() - self._started
            note(f"scanned {self.scanned} items in {self.pages} pages ({elapsed:.1f}s)")
        if self.skipped:
            note(f"skipped {self.skipped} items that are not idempotency records")

    def _print(self, text: str) -> None:
        if self._tty:
            sys.stderr.write("\r\033[K" + text)
            sys.stderr.flush()
        else:
            note(text)


def is_stuck(record: IdempotencyRecord, cutoff_ms: int) -> bool:
    """Tell whether ``record`` is IN_PROGRESS with a lease that ended before ``cutoff_ms``."""
    return record.status is Status.IN_PROGRESS and record.lease_passed(cutoff_ms)


def view(record: IdempotencyRecord, *, now_ms: int, cutoff_ms: int) -> dict[str, Any]:
    """Return what an operator sees of ``record`` at ``now_ms``, without its result."""
    expiry_ms = None if record.expiry_timestamp is None else record.expiry_timestamp * 1000
    lease_ms = record.in_progress_expiry_timestamp
    in_progress = record.status is Status.IN_PROGRESS
    return {
        "key": record.idempotency_key,
        "status": record.effective_status(now_ms).value,
        "stored_status": record.status.value,
        "stuck": is_stuck(record, cutoff_ms),
        "expires_at": iso(expiry_ms, seconds_only=True),
        "expires_in_seconds": None if expiry_ms is None else (expiry_ms - now_ms) // 1000,
        "lease_ends_at": iso(lease_ms) if in_progress else None,
        "lease_remaining_seconds": (
            round((lease_ms - now_ms) / 1000, 3) if in_progress and lease_ms is not None else None
        ),
        "owner": record.owner,
        "validation_hash": record.payload_hash,
    }


def with_result(record_view: dict[str, Any], record: IdempotencyRecord) -> dict[str, Any]:
    """Add the decoded result (and the exact stored text) to a view.

    A result offloaded to S3 is not fetched: ``result`` is None and ``offloaded`` names the
    object (``bucket``, ``key``, ``size``, ``sha256``; ``malformed`` when the reference is not
    readable). ``offloaded`` is None for a result held in the item.
    """
    data = record.response_data
    offloaded = None if data is None else offload_reference(data)
    reason = None if data is None or offloaded is not None else unstorable_reason(data)
    result = None
    if data is not None and reason is None and offloaded is None:
        result = jsonable(decode_result(data))
    return {
        **record_view,
        "result": result,
        "unstorable_reason": reason,
        "offloaded": offloaded,
        "stored_data": data,
    }


def offload_reference(data: str) -> dict[str, Any] | None:
    """Return where an offloaded result lives, when ``data`` is an S3 reference; else None."""
    if not is_reference(data):
        return None
    try:
        bucket, key, sha256, size = parse_reference(data)
    except IdempotencyCorruptRecordError:
        return {"malformed": True}
    return {"bucket": bucket, "key": key, "size": size, "sha256": sha256}


def jsonable(value: Any) -> Any:
    """Turn a decoded result into plain JSON for display (Decimal as number, bytes as base64)."""
    if isinstance(value, decimal.Decimal):  # as a number when that shows it exactly
        if value.is_finite() and int(value.as_tuple().exponent) >= 0:
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


def iso(epoch_ms: int | None, *, seconds_only: bool = False) -> str | None:
    """Return ``epoch_ms`` as ISO-8601 UTC (``...Z``); None stays None."""
    if epoch_ms is None:
        return None
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=_UTC)
    text = moment.isoformat(timespec="seconds" if seconds_only else "milliseconds")
    return text.replace("+00:00", "Z")


def relative(delta_ms: int | None) -> str:
    """Return ``"in 4m 2s"`` for a future delta, ``"4m 2s ago"`` for a past one."""
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


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Return ``rows`` as a left-aligned text table under ``headers``."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = [
        "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in (headers, *rows)
    ]
    return "\n".join(lines)


def write_json(value: Any) -> None:
    """Print ``value`` as indented JSON on stdout."""
    print(json.dumps(value, indent=2, ensure_ascii=False))


def note(message: str) -> None:
    """Print a human note (summaries, progress) on stderr, keeping stdout for data."""
    print(message, file=sys.stderr)
