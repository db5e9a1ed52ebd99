"""Count idempotency decisions as CloudWatch metrics.

Metrics are off by default and cost nothing then: nothing here is imported or called unless a
config's ``decision_hook`` is one of these. Two hooks are provided:

- `EMFMetrics` prints CloudWatch Embedded Metric Format documents to stdout, which Lambda ships
  to CloudWatch Logs and CloudWatch turns into metrics; no client, no extra request.
- `PowertoolsMetricsHook` adds the same metrics to a Powertools ``Metrics`` object, so they are
  flushed with the user's own metrics by ``@metrics.log_metrics``.

Metrics per decision (unit Count unless noted), as `decision_metrics` derives them:

| metric | counts |
| --- | --- |
| ``Claimed`` | the key was free: the body ran and its result was stored |
| ``TakenOver`` | a holder's lease had passed: this call took over and stored |
| ``Replayed`` | a stored result was returned (every source) |
| ``ReplayedFromCache`` | ... of which from the per-process cache (no store call) |
| ``WaitedAndReplayed`` | ... of which after waiting for an in-progress holder |
| ``InProgressConflict`` | another invocation held the key: already-in-progress error |
| ``ValidationFailed`` | same key, different validated payload |
| ``Released`` | the body raised (or its result was not to be stored) |
| ``LeaseLost`` | the lease was taken over while the body ran |
| ``ReleaseFailed`` | the body raised and releasing the record failed too |
| ``CompleteFailed`` | the body ran but storing its result failed |
| ``UnstorableResult`` | the result cannot be stored; a marker was stored |
| ``NoKeySkipped`` | no key material: the body ran without idempotency |
| ``Suspended`` | a durable execution suspended: its claim stays |
| ``Disabled`` | idempotency is switched off by environment variable |
| ``StoreErrors`` | a store call failed (claim, get, complete or release) |
| ``StoreErrors<Operation>`` | the same per operation: ``StoreErrorsClaim``, ... |
| ``StoreLatency`` | time spent in store calls by the invocation (Milliseconds) |
| ``StoreCalls`` | store calls made by the invocation (a claim, a completion...) |
| ``StoreRequests`` | DynamoDB requests sent, botocore's retries included; a grouped one once |

Outcomes added later are counted under their CamelCase name. The outbox publisher prints its own
metrics (``OutboxOldestUnpublishedAge`` and counts) with `EMFMetrics.put`.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from idempotent_lambda._clock import SYSTEM_CLOCK, Clock
from idempotent_lambda._observability import Decision, Outcome
from idempotent_lambda.exceptions import IdempotencyConfigError

__all__ = ["EMFMetrics", "Metric", "PowertoolsMetricsHook", "decision_metrics"]

COUNT = "Count"
MILLISECONDS = "Milliseconds"
SECONDS = "Seconds"

#: EMF limits: metrics per document, values per metric, dimensions per dimension set.
MAX_METRICS_PER_DOCUMENT = 100
MAX_VALUES_PER_METRIC = 100
MAX_DIMENSIONS = 30

_OUTCOME_METRIC = {
    Outcome.CLAIMED: "Claimed",
    Outcome.TAKEN_OVER: "TakenOver",
    Outcome.REPLAYED: "Replayed",
    Outcome.IN_PROGRESS: "InProgressConflict",
    Outcome.VALIDATION_FAILED: "ValidationFailed",
    Outcome.RELEASED: "Released",
    Outcome.RELEASE_FAILED: "ReleaseFailed",
    Outcome.LEASE_LOST: "LeaseLost",
    Outcome.COMPLETE_FAILED: "CompleteFailed",
    Outcome.UNSTORABLE: "UnstorableResult",
    Outcome.SKIPPED: "NoKeySkipped",
    Outcome.DISABLED: "Disabled",
}
_REPLAY_SOURCE_METRIC = {"cache": "ReplayedFromCache", "wait": "WaitedAndReplayed"}
_STORE_FAILURES = frozenset({Outcome.STORE_ERROR, Outcome.COMPLETE_FAILED, Outcome.RELEASE_FAILED})


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric data point derived from a decision."""

    name: str
    unit: str
    value: float


def decision_metrics(decision: Decision) -> list[Metric]:
    """Return the metrics one decision counts (see the module docstring for the list)."""
    outcome = decision.outcome
    metrics: list[Metric] = []
    if outcome is not Outcome.STORE_ERROR:
        metrics.append(Metric(_OUTCOME_METRIC.get(outcome) or _camel(outcome.value), COUNT, 1))
    if outcome is Outcome.REPLAYED and decision.source in _REPLAY_SOURCE_METRIC:
        metrics.append(Metric(_REPLAY_SOURCE_METRIC[decision.source], COUNT, 1))
    if outcome in _STORE_FAILURES:
        metrics.append(Metric("StoreErrors", COUNT, 1))
        if decision.operation:
            metrics.append(Metric("StoreErrors" + _camel(decision.operation), COUNT, 1))
    if decision.store_calls:
        metrics.append(Metric("StoreLatency", MILLISECONDS, round(decision.store_ms, 3)))
        metrics.append(Metric("StoreCalls", COUNT, decision.store_calls))
    if decision.store_requests:
        metrics.append(Metric("StoreRequests", COUNT, decision.store_requests))
    return metrics


class EMFMetrics:
    """A ``decision_hook`` that prints decisions as CloudWatch Embedded Metric Format documents.

    Use it as ``IdempotencyConfig(decision_hook=EMFMetrics("Orders", service="orders"))``. Each
    document is one JSON line on ``stream``; in Lambda, stdout goes to CloudWatch Logs, which
    extracts the metrics. Documents follow the EMF specification: ``_aws.Timestamp`` (epoch ms),
    one ``CloudWatchMetrics`` directive with the namespace, one dimension set and at most 100
    metrics, and every dimension and metric value as a top-level key.

    By default every decision is printed at once (``auto_flush=True``): nothing is lost when the
    execution environment is frozen or killed. With ``auto_flush=False`` decisions are
    aggregated (counts summed, latencies listed) until `flush` is called, e.g. in a ``finally``
    at the end of the handler; the buffer flushes itself before it would exceed a document.

    Thread-safe.

    Args:
        namespace: CloudWatch namespace of the metrics.
        dimensions: Extra dimensions, ``{name: value}``, on every metric.
        service: Value of a ``service`` dimension (the Powertools convention); by default
            ``POWERTOOLS_SERVICE_NAME`` when set, else no such dimension.
        function_dimension: Add a ``Function`` dimension holding the decorated function's
            qualified name, to tell several decorated functions apart.
        auto_flush: Print one document per decision; False buffers until `flush`.
        stream: Where documents go; by default ``sys.stdout`` as it is when writing.
        clock: Time source of ``_aws.Timestamp``.

    Raises:
        IdempotencyConfigError: A bad namespace, dimension name or value, or more than 30
            dimensions.
    """

    def __init__(
        self,
        namespace: str,
        *,
        dimensions: Mapping[str, str] | None = None,
        service: str | None = None,
        function_dimension: bool = False,
        auto_flush: bool = True,
        stream: TextIO | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if not isinstance(namespace, str) or not 0 < len(namespace) <= 255:
            raise IdempotencyConfigError("namespace must be a string of 1 to 255 characters")
        self.namespace = namespace
        base = dict(dimensions or {})
        service = service if service is not None else os.environ.get("POWERTOOLS_SERVICE_NAME")
        if service:
            base["service"] = service
        for name, value in base.items():
            _check_dimension(name, value)
        if len(base) + function_dimension > MAX_DIMENSIONS:
            raise IdempotencyConfigError(f"EMF allows at most {MAX_DIMENSIONS} dimensions")
        if function_dimension and "Function" in base:
            raise IdempotencyConfigError("'Function' is used by function_dimension=True")
        self._dimensions = base
        self._function_dimension = function_dimension
        self._auto_flush = auto_flush
        self._stream = stream
        self._clock = clock
        self._lock = threading.Lock()
        #: Buffered series: dimension values -> metric name -> (unit, values).
        self._buffer: dict[tuple[tuple[str, str], ...], dict[str, tuple[str, list[float]]]] = {}
        self._buffered_values = 0

    def __call__(self, decision: Decision) -> None:
        """Count ``decision``: print it now, or buffer it when ``auto_flush`` is off."""
        metrics = decision_metrics(decision)
        if not metrics:
            return
        dimensions = dict(self._dimensions)
        if self._function_dimension:
            dimensions["Function"] = decision.function or "unknown"
        if self._auto_flush:
            series = {m.name: (m.unit, [m.value]) for m in metrics}
            self._write(self._documents(dimensions, series))
            return
        with self._lock:
            group = self._buffer.setdefault(tuple(dimensions.items()), {})
            for metric in metrics:
                unit, values = group.setdefault(metric.name, (metric.unit, []))
                if unit == COUNT and values:
                    values[0] += metric.value
                else:
                    values.append(metric.value)
                    self._buffered_values += 1
            full = (
                len(group) >= MAX_METRICS_PER_DOCUMENT
                or self._buffered_values >= MAX_VALUES_PER_METRIC
            )
        if full:
            self.flush()

    def put(self, metrics: Sequence[Metric]) -> None:
        """Print ``metrics`` now, as one document with the configured dimensions.

        For measurements that are not decisions, such as the outbox publisher's.
        """
        if metrics:
            series = {m.name: (m.unit, [m.value]) for m in metrics}
            self._write(self._documents(dict(self._dimensions), series))

    def flush(self) -> None:
        """Print everything buffered (nothing when empty or when ``auto_flush`` is on)."""
        with self._lock:
            buffer, self._buffer, self._buffered_values = self._buffer, {}, 0
        documents = [
            document
            for dimensions, series in buffer.items()
            for document in self._documents(dict(dimensions), series)
        ]
        self._write(documents)

    def _documents(
        self, dimensions: dict[str, str], series: Mapping[str, tuple[str, list[float]]]
    ) -> list[dict[str, Any]]:
        """Build EMF documents for one dimension set, split to respect the EMF limits."""
        timestamp = self._clock.now_ms()
        pending = [(name, unit, list(values)) for name, (unit, values) in series.items()]
        documents = []
        while pending:
            batch, pending = pending[:MAX_METRICS_PER_DOCUMENT], pending[MAX_METRICS_PER_DOCUMENT:]
            document: dict[str, Any] = {
                "_aws": {
                    "Timestamp": timestamp,
                    "CloudWatchMetrics": [
                        {
                            "Namespace": self.namespace,
                            "Dimensions": [list(dimensions)],
                            "Metrics": [{"Name": name, "Unit": unit} for name, unit, _ in batch],
                        }
                    ],
                },
                **dimensions,
            }
            for name, unit, values in batch:
                head, rest = values[:MAX_VALUES_PER_METRIC], values[MAX_VALUES_PER_METRIC:]
                document[name] = head[0] if len(head) == 1 else head
                if rest:
                    pending.append((name, unit, rest))
            documents.append(document)
        return documents

    def _write(self, documents: list[dict[str, Any]]) -> None:
        if not documents:
            return
        text = "".join(json.dumps(d, separators=(",", ":")) + "\n" for d in documents)
        stream = self._stream if self._stream is not None else sys.stdout
        with self._lock:
            stream.write(text)
            stream.flush()


class PowertoolsMetricsHook:
    """A ``decision_hook`` that adds decision metrics to a Powertools ``Metrics`` object.

    The metrics take that object's namespace and dimensions and are flushed with the user's own
    metrics (``@metrics.log_metrics``), so one EMF document carries both. Powertools is the
    user's dependency, not ours: anything with ``add_metric(name=, unit=, value=)`` works.

    Args:
        metrics: The ``aws_lambda_powertools.Metrics`` instance.

    Raises:
        IdempotencyConfigError: ``metrics`` has no ``add_metric`` method.
    """

    def __init__(self, metrics: Any) -> None:
        if not callable(getattr(metrics, "add_metric", None)):
            raise IdempotencyConfigError("metrics must be a Powertools Metrics object")
        self.metrics = metrics

    def __call__(self, decision: Decision) -> None:
        """Add the metrics ``decision`` counts."""
        for metric in decision_metrics(decision):
            self.metrics.add_metric(name=metric.name, unit=metric.unit, value=metric.value)


def _camel(text: str) -> str:
    return "".join(part[:1].upper() + part[1:].lower() for part in text.split("_") if part)


def _check_dimension(name: object, value: object) -> None:
    if not isinstance(name, str) or not 0 < len(name) <= 255 or name.startswith(":"):
        raise IdempotencyConfigError(f"bad dimension name {name!r}")
    if name == "_aws" or name in _RESERVED_NAMES or name.startswith("StoreErrors"):
        raise IdempotencyConfigError(f"dimension name {name!r} clashes with a metric name")
    if not isinstance(value, str) or not 0 < len(value) <= 1024:
        raise IdempotencyConfigError(f"dimension {name!r} needs a string value of 1-1024 chars")


_RESERVED_NAMES = frozenset(
    {
        *_OUTCOME_METRIC.values(),
        *_REPLAY_SOURCE_METRIC.values(),
        "StoreLatency",
        "StoreCalls",
        "StoreRequests",
    }
)
