"""Read a CloudWatch dashboard out of a template, and the metrics the library really emits.

Shared by tests/functional/test_template_dashboard.py (template.yaml) and
cdk/tests/test_dashboard.py (the construct's, loaded by path: cdk/tests is its own `tests`).
The emitted names are derived by running the library's code, never typed here: every outcome
through `decision_metrics`, and the outbox publisher's measurement (the sweeper reports through
the same publisher) printed by its default EMF sink.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from unittest import mock

from idempotent_lambda._observability import Decision, Outcome
from idempotent_lambda.metrics import decision_metrics
from idempotent_lambda.outbox._publisher import Publisher

#: Inputs that make `decision_metrics` count everything a decision can: each replay source and
#: failed operation (Decision's documented values), store calls and requests.
_SOURCES = (None, "store", "cache", "wait", "batch_read")
_OPERATIONS = (None, "claim", "get", "complete", "release")


def decision_metric_names(*outcomes: Outcome, store: bool = True) -> set[str]:
    """Return what `decision_metrics` counts for ``outcomes`` (all when none are given)."""
    names: set[str] = set()
    for outcome, source, operation in itertools.product(
        outcomes or tuple(Outcome), _SOURCES, _OPERATIONS
    ):
        decision = Decision(
            outcome,
            "handler",
            store_ms=1.0 if store else 0.0,
            store_calls=int(store),
            store_requests=int(store),
            source=source,
            operation=operation,
        )
        names.update(metric.name for metric in decision_metrics(decision))
    return names


def store_metric_names() -> set[str]:
    """Return the metrics of the store's cost: those a decision adds when it called the store."""
    return decision_metric_names() - decision_metric_names(store=False)


@dataclass(frozen=True)
class EmittedDocument:
    """What one EMF document of the outbox carries: namespace, dimensions, metric names."""

    namespace: str
    dimensions: dict[str, str]
    names: set[str]


class _Store:
    """Just enough of a DynamoDB store for a `Publisher` to be built; it is never called."""

    clock = None

    def outbox_key(self, keys: Any) -> None:
        raise AssertionError("not called")

    outbox_items = outbox_mark_published = outbox_partition = outbox_pending_keys = outbox_key


def outbox_emitted(environ: Mapping[str, str]) -> EmittedDocument:
    """Return what the outbox publisher and sweeper print, under a function's ``environ``.

    Runs the publisher's measurement of a batch where every count is non-zero (one published,
    one failed, one already published, one not marked, one waiting), with its default sink,
    which takes the namespace and service from the environment as in Lambda.
    """
    publisher = Publisher(_Store())
    out = io.StringIO()
    with mock.patch.dict(os.environ), contextlib.redirect_stdout(out):
        for key in ("POWERTOOLS_METRICS_NAMESPACE", "POWERTOOLS_SERVICE_NAME"):
            os.environ.pop(key, None)
            if key in environ:
                os.environ[key] = environ[key]
        publisher._measure([], 1, 2_000, 1_000, published=1, skipped=1, unmarked=1)
    (document,) = [json.loads(line) for line in out.getvalue().splitlines()]
    (directive,) = document["_aws"]["CloudWatchMetrics"]
    (dimension_names,) = directive["Dimensions"]
    return EmittedDocument(
        namespace=directive["Namespace"],
        dimensions={name: document[name] for name in dimension_names},
        names={metric["Name"] for metric in directive["Metrics"]},
    )


def placeholder(node: Any) -> str:
    """Write a `Ref` or `Fn::GetAtt` as `Fn::Sub` does: ``${Name}``, ``${Name.Attribute}``."""
    if isinstance(node, str):
        return node
    if "Ref" in node:
        return "${" + node["Ref"] + "}"
    if "Fn::GetAtt" in node:
        return "${" + ".".join(node["Fn::GetAtt"]) + "}"
    raise AssertionError(f"cannot resolve {node!r} in a dashboard body")


def dashboard_body(body: Any) -> dict[str, Any]:
    """Parse a `DashboardBody`: a string, a `Fn::Sub` (template.yaml) or a `Fn::Join` (the
    CDK's), with references left as ``${...}`` placeholders."""
    if isinstance(body, dict) and "Fn::Sub" in body:
        body = body["Fn::Sub"]
        body = body[0] if isinstance(body, list) else body
    elif isinstance(body, dict) and "Fn::Join" in body:
        separator, parts = body["Fn::Join"]
        body = separator.join(placeholder(part) for part in parts)
    parsed: dict[str, Any] = json.loads(body)
    return parsed


@dataclass(frozen=True)
class Series:
    """One metric a dashboard charts."""

    namespace: str
    name: str
    dimensions: dict[str, str]
    title: str


def charted(body: Mapping[str, Any]) -> list[Series]:
    """Return every metric of the dashboard's metric widgets (``"."`` repeats the row above)."""
    series = []
    for widget in body["widgets"]:
        if widget["type"] != "metric":
            continue
        previous: list[Any] = []
        for row in widget["properties"]["metrics"]:
            fields = [f for f in row if not isinstance(f, dict)]
            fields = [p if f == "." else f for f, p in itertools.zip_longest(fields, previous)]
            previous = fields
            namespace, name, *pairs = fields
            dimensions = dict(zip(pairs[::2], pairs[1::2], strict=True))
            series.append(Series(namespace, name, dimensions, widget["properties"]["title"]))
    return series


def names_in(series: Iterable[Series], namespace: str) -> set[str]:
    """Return the metric names charted in ``namespace``."""
    return {s.name for s in series if s.namespace == namespace}
