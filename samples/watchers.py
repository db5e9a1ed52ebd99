"""What watches the sample app while it runs, and the transcript that tells the story.

`Transcript` prints the scenario's steps and counts the checks that failed. `MetricsOutput`
keeps the functions' EMF metric documents, `DecisionLog` the library's decisions, and
`RequestCounter` the requests the functions send, by table (or bucket) and operation.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TextIO

import boto3

from samples.local_lambda import is_outbox_key

#: Outcomes after which the handler body had run (see `idempotent_lambda.Outcome`).
EXECUTED = frozenset(
    {"CLAIMED", "TAKEN_OVER", "RELEASED", "RELEASE_FAILED", "LEASE_LOST", "COMPLETE_FAILED"}
)
#: The decision metrics of those outcomes (`idempotent_lambda.metrics`): one per body run.
RUN_METRICS = ("Claimed", "TakenOver", "Released", "ReleaseFailed", "LeaseLost", "CompleteFailed")


class Transcript:
    """Print numbered steps and checks; remember the checks that failed."""

    def __init__(self, out: Callable[[str], None] = print) -> None:
        self.out = out
        self.failures: list[str] = []
        self.checks = 0

    def step(self, text: str) -> None:
        """Print a scenario step."""
        self.out(f"\n== {text}")

    def note(self, text: str) -> None:
        """Print a detail line."""
        self.out(f"   {text}")

    def expect(self, what: str, ok: bool) -> bool:
        """Print a check, count it if it failed, and return ``ok``."""
        self.checks += 1
        self.out(f"   [{'ok' if ok else 'FAILED'}] {what}")
        if not ok:
            self.failures.append(what)
        return ok


class MetricsOutput:
    """Taps stdout while the app's functions run: keeps EMF documents, passes the rest through.

    In Lambda, the functions' metrics (Powertools ``@metrics.log_metrics``, carrying the
    library's decision metrics) are JSON documents on stdout that CloudWatch turns into metrics.
    Locally they would bury the narration, so they are kept in ``documents`` to be counted.
    The tap is installed while at least one invocation runs (`tapping`), from any thread.
    """

    def __init__(self) -> None:
        self.documents: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._users = 0
        self._target: TextIO = sys.stdout
        self._swallow_newline = threading.local()  # print() writes its newline separately

    @contextmanager
    def tapping(self) -> Iterator[None]:
        """Route stdout through this object while the block runs."""
        with self._lock:
            if self._users == 0:
                self._target = sys.stdout
                sys.stdout = self  # type: ignore[assignment]
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    sys.stdout = self._target

    def write(self, text: str) -> int:
        """Keep ``text`` if it is an EMF document, else write it to the real stdout."""
        with self._lock:
            if text.startswith('{"_aws"'):
                self.documents.append(json.loads(text))
                self._swallow_newline.value = True
            elif text == "\n" and getattr(self._swallow_newline, "value", False):
                self._swallow_newline.value = False
            else:
                self._swallow_newline.value = False
                self._target.write(text)
        return len(text)

    def flush(self) -> None:
        """Flush the real stdout."""
        self._target.flush()


def metric_total(documents: list[dict[str, Any]], metric: str) -> float:
    """Sum the values of ``metric`` over EMF ``documents``."""
    found = 0.0
    for document in documents:
        value = document.get(metric, 0)
        found += sum(value) if isinstance(value, list) else float(value)
    return found


class DecisionLog(logging.Handler):
    """Collect the library's decisions (one log record each on ``idempotent_lambda``)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.decisions: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the decision fields of ``record``, if it is a decision."""
        fields = getattr(record, "idempotency", None)
        if isinstance(fields, dict):
            self.decisions.append(dict(fields))

    def outcomes(self, key_prefix: str) -> Counter[str]:
        """Count the outcomes of one function, by the key prefix it uses."""
        return Counter(
            d["outcome"] for d in self.decisions if str(d.get("key", "")).startswith(key_prefix)
        )

    def executions(self, key_prefix: str) -> int:
        """Count how often the function's body ran."""
        return sum(n for outcome, n in self.outcomes(key_prefix).items() if outcome in EXECUTED)

    def replays(self, key_prefix: str) -> int:
        """Count how often the function's stored result was replayed."""
        return self.outcomes(key_prefix)["REPLAYED"]


class RequestCounter:
    """Count a boto3 session's DynamoDB requests by table and S3 requests by bucket.

    A ``TransactWriteItems`` counts once on every table it writes (CreateOrder's writes the
    order and the idempotency record in one request).
    """

    def __init__(self, session: boto3.session.Session) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        #: The requests on outbox items only (the publisher's reads and marks), by table and
        #: operation: they are no idempotency decision's.
        self.outbox: Counter[tuple[str, str]] = Counter()
        #: The ``TransactItems`` of every transaction sent, in order.
        self.transactions: list[list[dict[str, Any]]] = []
        #: Entries sent with ``PutEvents``, by bus.
        self.events_put: Counter[str] = Counter()
        self._lock = threading.Lock()
        session.events.register("before-parameter-build.dynamodb", self._seen)
        session.events.register("before-parameter-build.s3", self._seen_s3)
        session.events.register("before-parameter-build.events.PutEvents", self._seen_events)

    def _seen_events(self, params: Mapping[str, Any], **_: Any) -> None:
        with self._lock:
            for entry in params.get("Entries", []):
                self.events_put[str(entry.get("EventBusName", "default"))] += 1
            self.counts["events", "PutEvents"] += 1

    def _seen_s3(self, params: Mapping[str, Any], event_name: str, **_: Any) -> None:
        with self._lock:
            self.counts[str(params.get("Bucket", "-")), event_name.rsplit(".", 1)[-1]] += 1

    def _seen(self, params: Mapping[str, Any], event_name: str, **_: Any) -> None:
        operation = event_name.rsplit(".", 1)[-1]
        tables = {str(params.get("TableName", "-"))}
        if "RequestItems" in params:  # BatchGetItem: one request on every table it reads
            tables = {str(name) for name in params["RequestItems"]}
        writes = params.get("TransactItems")
        if writes is not None:
            tables = {
                str(body.get("TableName", "-")) for write in writes for body in write.values()
            }
        keys = [params.get("Key")] if "Key" in params else []
        for request in params.get("RequestItems", {}).values():
            keys.extend(request.get("Keys", []))
        on_outbox = bool(keys) and all(
            is_outbox_key((key or {}).get("id", {}).get("S", "")) for key in keys
        )
        with self._lock:
            for table in tables:
                self.counts[table, operation] += 1
                if on_outbox:
                    self.outbox[table, operation] += 1
            if writes is not None:
                self.transactions.append(list(writes))

    def for_table(self, table: str) -> Counter[str]:
        """Count the requests on ``table`` (or bucket) by operation."""
        return Counter({op: n for (name, op), n in self.counts.items() if name == table})
