"""Read every record of a table, page by page, showing progress on long scans."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from idempotent_lambda.persistence._dynamodb_item import CorruptItemError, ItemSchema
from idempotent_lambda.record import IdempotencyRecord

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

#: Seconds between two progress lines.
PROGRESS_INTERVAL_S = 1.0


class Progress:
    """Progress of a scan on stderr: a line per interval while it runs, a summary if it paged."""

    def __init__(self, *, enabled: bool, interval_s: float = PROGRESS_INTERVAL_S) -> None:
        self.enabled = enabled
        self.interval_s = interval_s
        self.pages = self.scanned = self.matched = self.skipped = 0
        self._started = self._last = time.monotonic()
        self._tty = sys.stderr.isatty()

    def page(self, scanned: int) -> None:
        """Count one page of ``scanned`` items; print progress when the interval has passed."""
        self.pages += 1
        self.scanned += scanned
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
            print(
                f"scanned {self.scanned} items in {self.pages} pages ({elapsed:.1f}s)",
                file=sys.stderr,
            )
        if self.skipped:
            print(f"skipped {self.skipped} items that are not idempotency records", file=sys.stderr)

    def _print(self, text: str) -> None:
        if self._tty:
            sys.stderr.write("\r\033[K" + text)
            sys.stderr.flush()
        else:
            print(text, file=sys.stderr)


def records(
    client: DynamoDBClient,
    table: str,
    schema: ItemSchema,
    *,
    prefix: str | None,
    page_size: int | None,
    progress: Progress,
    with_data: bool = False,
) -> Iterator[IdempotencyRecord]:
    """Yield the table's records whose key starts with ``prefix``, reading page by page.

    A simple-key table is scanned; in composite-key mode only the store's partition is queried.
    Results are not read unless ``with_data``. Items that are not records are counted, not
    yielded.
    """
    request = _request(table, schema, prefix=prefix, page_size=page_size, with_data=with_data)
    read = client.query if schema.sort_key_attr else client.scan
    while True:
        response = read(**request)
        items = response.get("Items", [])
        progress.page(response.get("ScannedCount", len(items)))
        for item in items:
            try:
                record = schema.from_item(item)
            except CorruptItemError:
                progress.skipped += 1
                continue
            yield record
        last = response.get("LastEvaluatedKey")
        if not last:
            return
        request["ExclusiveStartKey"] = last


def _request(
    table: str, schema: ItemSchema, *, prefix: str | None, page_size: int | None, with_data: bool
) -> dict[str, Any]:
    names: dict[str, str] = {}
    values: dict[str, Any] = {}
    request: dict[str, Any] = {"TableName": table}
    if page_size:
        request["Limit"] = page_size
    attributes = [
        schema.key_attr,
        *([schema.sort_key_attr] if schema.sort_key_attr else []),
        schema.status_attr,
        schema.expiry_attr,
        schema.in_progress_expiry_attr,
        schema.validation_key_attr,
        schema.owner_attr,
        *([schema.data_attr] if with_data else []),
    ]
    placeholders = {f"#a{i}": name for i, name in enumerate(attributes)}
    names.update(placeholders)
    request["ProjectionExpression"] = ", ".join(placeholders)
    prefix_condition = "begins_with(#key, :prefix)"
    if prefix:
        names["#key"] = schema.idempotency_key_attr
        values[":prefix"] = {"S": prefix}
    if schema.sort_key_attr:
        names["#pk"] = schema.key_attr
        values[":pk"] = {"S": schema.static_pk_value}
        request["KeyConditionExpression"] = "#pk = :pk" + (
            f" AND {prefix_condition}" if prefix else ""
        )
    elif prefix:
        request["FilterExpression"] = prefix_condition
    request["ExpressionAttributeNames"] = names
    if values:
        request["ExpressionAttributeValues"] = values
    return request
