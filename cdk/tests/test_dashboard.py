"""`IdempotencyTable.add_dashboard`, synthesized: every metric it charts is one the library
emits, under the functions' namespace and service, or a CloudWatch metric of the stack's own
functions and queues; and it shows the four groups (decisions, the store's cost, batch failures,
the outbox's age).

What the library emits is derived by running it (tests/functional/_dashboard.py, shared with
template.yaml's test), never listed here.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any

import pytest
from idempotent_lambda._observability import Outcome
from idempotent_lambda.outbox import AGE_METRIC

from idempotent_lambda_cdk import IdempotencyTable

from .conftest import ROOT, Synthesized
from .test_outbox import STACK, of_type


def _load_helper() -> ModuleType:
    """tests/functional/_dashboard.py, by path: here `tests` is cdk/tests."""
    spec = importlib.util.spec_from_file_location(
        "library_dashboard_metrics", ROOT / "tests" / "functional" / "_dashboard.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


metrics = _load_helper()


def dashboard_series(template: dict[str, Any]) -> list[Any]:
    (dashboard,) = of_type(template, "AWS::CloudWatch::Dashboard").values()
    return list(metrics.charted(metrics.dashboard_body(dashboard["DashboardBody"])))


def environment(template: dict[str, Any]) -> dict[str, str]:
    """The metric settings of the functions' environment (the example gives all the same)."""
    keys = ("POWERTOOLS_METRICS_NAMESPACE", "POWERTOOLS_SERVICE_NAME")
    (settings,) = {
        tuple(p["Environment"]["Variables"][key] for key in keys)
        for p in of_type(template, "AWS::Lambda::Function").values()
        if keys[0] in p.get("Environment", {}).get("Variables", {})
    }
    return dict(zip(keys, settings, strict=True))


def stack_metric(template: dict[str, Any], series: Any) -> bool:
    """Tell whether ``series`` is a CloudWatch metric of one of the stack's functions or
    queues."""
    functions = {"${" + name + "}" for name in of_type(template, "AWS::Lambda::Function")}
    queues = {"${" + name + ".QueueName}" for name in of_type(template, "AWS::SQS::Queue")}
    if series.namespace == "AWS/Lambda" and series.name in {"Errors", "Invocations"}:
        return series.dimensions.keys() == {"FunctionName"} and (
            series.dimensions["FunctionName"] in functions
        )
    if series.namespace == "AWS/SQS" and series.name == "ApproximateNumberOfMessagesVisible":
        return series.dimensions.keys() == {"QueueName"} and (
            series.dimensions["QueueName"] in queues
        )
    return False


@pytest.fixture(scope="module")
def example(synthesized: Synthesized) -> dict[str, Any]:
    return synthesized.templates[STACK]


def test_every_metric_charted_is_emitted_by_the_library_or_the_stack(
    example: dict[str, Any],
) -> None:
    """In the functions' namespace, only names the library emits, with the dimensions its
    documents carry under the functions' environment; elsewhere, only the stack's own
    functions' and queues' metrics."""
    emitted = metrics.outbox_emitted(environment(example))
    names = metrics.decision_metric_names() | emitted.names
    series = dashboard_series(example)
    ours = [s for s in series if s.namespace == emitted.namespace]
    assert ours
    assert [] == [s.name for s in ours if s.name not in names]
    assert [] == [s for s in ours if s.dimensions != emitted.dimensions]
    assert [] == [
        s for s in series if s.namespace != emitted.namespace and not stack_metric(example, s)
    ]


def test_the_four_groups_are_charted(example: dict[str, Any]) -> None:
    """Claims, replays and conflicts; the store's latency and requests; the failed invocations
    of every function behind a mapping that reports batch item failures, and the failure
    queues; all the outbox reports, with the sweeper's runs."""
    emitted = metrics.outbox_emitted(environment(example))
    series = dashboard_series(example)
    charted = metrics.names_in(series, emitted.namespace)
    decisions = metrics.decision_metric_names(
        Outcome.CLAIMED, Outcome.TAKEN_OVER, Outcome.REPLAYED, Outcome.IN_PROGRESS, store=False
    )
    assert decisions <= charted
    assert metrics.store_metric_names() <= charted
    assert AGE_METRIC in charted
    assert emitted.names <= charted

    batch = {
        "${" + p["FunctionName"]["Ref"] + "}"
        for p in of_type(example, "AWS::Lambda::EventSourceMapping").values()
        if "ReportBatchItemFailures" in p.get("FunctionResponseTypes", [])
    }
    assert 3 == len(batch)  # ProcessPayment, ReserveStock, PublishEvents
    errors = {s.dimensions["FunctionName"] for s in series if s.name == "Errors"}
    assert batch == errors
    on_failure = {
        metrics.placeholder(p["DestinationConfig"]["OnFailure"]["Destination"])
        for p in of_type(example, "AWS::Lambda::EventSourceMapping").values()
        if "DestinationConfig" in p
    }
    queues = {s.dimensions["QueueName"] for s in series if s.namespace == "AWS/SQS"}
    assert {d.removesuffix(".Arn}") + ".QueueName}" for d in on_failure} <= queues
    assert 3 == len(queues)  # and the two dead-letter queues the example names

    scheduled = {
        "${" + target["Arn"]["Fn::GetAtt"][0] + "}"
        for p in of_type(example, "AWS::Events::Rule").values()
        for target in p.get("Targets", [])
        if "ScheduleExpression" in p
    }
    runs = {s.dimensions["FunctionName"] for s in series if s.name == "Invocations"}
    assert scheduled == runs
    assert 1 == len(runs)


def test_without_an_outbox_or_a_batch_the_dashboard_has_neither(
    synthesized: Synthesized,
) -> None:
    """A table with no publisher charts no outbox metric; one with no batch function, no
    batch failure: nothing stays empty."""
    series = dashboard_series(synthesized.templates["TableOnly"])
    assert {s.namespace for s in series} == {"Orders"}
    assert not {s.name for s in series if s.name.startswith("Outbox")}


@pytest.mark.parametrize(
    ("namespace", "dimensions"), [("", {"service": "orders"}), ("Orders", {"service": ""})]
)
def test_a_dashboard_without_a_namespace_or_with_an_empty_dimension_is_refused(
    namespace: str, dimensions: dict[str, str]
) -> None:
    import aws_cdk as cdk

    table = IdempotencyTable(cdk.Stack(cdk.App(), "Refused"), "Idempotency")
    with pytest.raises(ValueError, match=r"namespace|dimensions"):
        table.add_dashboard(namespace=namespace, dimensions=dimensions)
