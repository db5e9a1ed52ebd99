"""template.yaml's dashboard, read as data: every metric it charts is one the library emits
(in the functions' namespace and service) or one the stack's alarms watch, and it shows the four
groups: decisions, the store's cost, batch failures, the outbox's age.

The emitted metrics come from the library's own code (tests/functional/_dashboard.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from idempotent_lambda._observability import Outcome
from idempotent_lambda.outbox import AGE_METRIC
from samples.local_stack import load_template
from tests.functional._dashboard import (
    Series,
    charted,
    dashboard_body,
    decision_metric_names,
    names_in,
    outbox_emitted,
    placeholder,
    store_metric_names,
)
from tests.functional.test_template import PUBLISHER, SWEEPER, TEMPLATE

NAMESPACE = "${MetricsNamespace}"


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template(TEMPLATE)


@pytest.fixture(scope="module")
def series(template: dict[str, Any]) -> list[Series]:
    (dashboard,) = [
        r for r in template["Resources"].values() if r["Type"] == "AWS::CloudWatch::Dashboard"
    ]
    return charted(dashboard_body(dashboard["Properties"]["DashboardBody"]))


def environment(template: dict[str, Any]) -> dict[str, str]:
    """The functions' environment, references as placeholders."""
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    return {name: placeholder(value) for name, value in variables.items()}


def alarmed(template: dict[str, Any]) -> list[tuple[str, str, dict[str, str]]]:
    """Namespace, metric and dimensions of every alarm of the template."""
    return [
        (
            placeholder(p["Namespace"]),
            p["MetricName"],
            {d["Name"]: placeholder(d["Value"]) for d in p.get("Dimensions", [])},
        )
        for r in template["Resources"].values()
        if r["Type"] == "AWS::CloudWatch::Alarm"
        for p in [r["Properties"]]
    ]


def test_the_library_s_metrics_are_charted_where_the_functions_emit_them(
    template: dict[str, Any], series: list[Series]
) -> None:
    """Namespace and dimensions are those of the outbox's EMF under the functions' environment
    (the decision metrics go through Powertools Metrics with the same namespace and service)."""
    emitted = outbox_emitted(environment(template))
    assert NAMESPACE == emitted.namespace
    ours = [s for s in series if s.namespace == NAMESPACE]
    assert ours
    assert [] == [s for s in ours if s.dimensions != emitted.dimensions]


def test_every_metric_charted_is_emitted_or_alarmed(
    template: dict[str, Any], series: list[Series]
) -> None:
    """A library metric the library never emits, or a CloudWatch metric no alarm of the stack
    watches (a misspelt name, a function that does not exist), fails."""
    emitted = decision_metric_names() | outbox_emitted(environment(template)).names
    assert [] == [s.name for s in series if s.namespace == NAMESPACE and s.name not in emitted]
    watched = alarmed(template)
    assert [] == [
        s
        for s in series
        if s.namespace != NAMESPACE and (s.namespace, s.name, s.dimensions) not in watched
    ]


def test_claims_replays_and_conflicts_are_charted(series: list[Series]) -> None:
    """Each outcome of a call that meets the store: claimed, taken over, replayed (from every
    source), in progress elsewhere."""
    wanted = decision_metric_names(
        Outcome.CLAIMED, Outcome.TAKEN_OVER, Outcome.REPLAYED, Outcome.IN_PROGRESS, store=False
    )
    assert wanted <= names_in(series, NAMESPACE)


def test_the_store_s_latency_and_requests_are_charted(series: list[Series]) -> None:
    """StoreLatency, StoreCalls and StoreRequests: what a decision adds when it used the store."""
    assert store_metric_names() <= names_in(series, NAMESPACE)


def test_batch_failures_are_charted(template: dict[str, Any], series: list[Series]) -> None:
    """The failed invocations of every function behind a mapping that reports batch item
    failures (its whole batch comes again), and the failure queues' depth."""
    batch = {
        r["Properties"]["FunctionName"]["Ref"].removesuffix(".Alias")
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::EventSourceMapping"
        and "ReportBatchItemFailures" in r["Properties"].get("FunctionResponseTypes", [])
    }
    assert PUBLISHER in batch
    errors = {
        s.dimensions["FunctionName"]
        for s in series
        if (s.namespace, s.name)
        == (
            "AWS/Lambda",
            "Errors",
        )
    }
    assert {"${" + name + "}" for name in batch} == errors
    queues = [s for s in series if s.namespace == "AWS/SQS"]
    destinations = {
        placeholder(r["Properties"]["DestinationConfig"]["OnFailure"]["Destination"])
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::EventSourceMapping" and "DestinationConfig" in r["Properties"]
    }
    on_failure = {d.removesuffix(".Arn}") + ".QueueName}" for d in destinations}
    assert on_failure <= {s.dimensions["QueueName"] for s in queues}


def test_the_outbox_s_age_and_the_sweeper_are_charted(
    template: dict[str, Any], series: list[Series]
) -> None:
    """Everything the publisher and the sweeper report, the oldest unpublished age first among
    them, and whether the sweeper runs at all."""
    charted_names = names_in(series, NAMESPACE)
    assert AGE_METRIC in charted_names
    assert outbox_emitted(environment(template)).names <= charted_names
    assert ("AWS/Lambda", "Invocations", {"FunctionName": "${" + SWEEPER + "}"}) in [
        (s.namespace, s.name, s.dimensions) for s in series
    ]
