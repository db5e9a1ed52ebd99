"""The CloudWatch dashboard of `IdempotencyTable.add_dashboard`: the library's metrics on a page.

The metric names are those idempotent_lambda emits (`idempotent_lambda.metrics` and the outbox
publisher's EMF); this distribution does not import the library, so cdk/tests/test_dashboard.py
checks every name here against what the library really emits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

#: Decisions of calls that met the store: run, taken over, replayed (and from where), refused.
DECISIONS = (
    "Claimed",
    "TakenOver",
    "Replayed",
    "ReplayedFromCache",
    "WaitedAndReplayed",
    "InProgressConflict",
    "ValidationFailed",
)
#: What went wrong: a body that raised, a lease lost while running, the store failing.
FAILURES = (
    "Released",
    "LeaseLost",
    "CompleteFailed",
    "ReleaseFailed",
    "StoreErrors",
    "UnstorableResult",
)
STORE_LATENCY = "StoreLatency"
STORE_COUNTS = ("StoreCalls", "StoreRequests")
OUTBOX_AGE = "OutboxOldestUnpublishedAge"
OUTBOX_COUNTS = (
    "OutboxPublished",
    "OutboxAlreadyPublished",
    "OutboxPublishFailed",
    "OutboxMarkFailed",
)
#: The age past which the outbox is an incident (the example's and template.yaml's alarm).
OUTBOX_AGE_LIMIT_SECONDS = 300

_WIDTH = 12
_HEIGHT = 6


def build_dashboard(
    scope: Construct,
    id: str,
    *,
    namespace: str,
    dimensions: Mapping[str, str],
    dashboard_name: str | None,
    period: Duration,
    batch_functions: Sequence[lambda_.IFunction],
    failure_queues: Sequence[sqs.IQueue],
    sweepers: Sequence[lambda_.IFunction],
    outbox: bool,
) -> cloudwatch.Dashboard:
    """Build the dashboard `IdempotencyTable.add_dashboard` documents."""

    def library(names: Sequence[str], statistic: str = "Sum") -> list[cloudwatch.IMetric]:
        return [
            cloudwatch.Metric(
                namespace=namespace,
                metric_name=name,
                dimensions_map=dict(dimensions),
                statistic=statistic,
                period=period,
                label=name,
            )
            for name in names
        ]

    def graph(
        title: str, left: Sequence[cloudwatch.IMetric], **options: Any
    ) -> cloudwatch.GraphWidget:
        return cloudwatch.GraphWidget(
            title=title, left=list(left), width=_WIDTH, height=_HEIGHT, **options
        )

    latency = [
        cloudwatch.Metric(
            namespace=namespace,
            metric_name=STORE_LATENCY,
            dimensions_map=dict(dimensions),
            statistic=statistic,
            period=period,
            label=label,
        )
        for statistic, label in (("p50", "p50"), ("p99", "p99"), ("Maximum", "max"))
    ]
    widgets = [
        graph("Claims, replays and in-progress conflicts", library(DECISIONS)),
        graph("Bodies that raised, lost leases, store failures", library(FAILURES)),
        graph("Store latency per invocation (ms)", latency),
        graph("Store calls and DynamoDB requests", library(STORE_COUNTS)),
    ]
    if batch_functions:
        errors = [
            f.metric_errors(statistic="Sum", period=period, label=f.node.id)
            for f in batch_functions
        ]
        widgets.append(graph("Batch failures: failed invocations of the batch functions", errors))
    if failure_queues:
        waiting = [
            q.metric_approximate_number_of_messages_visible(
                statistic="Maximum", period=period, label=q.node.id
            )
            for q in failure_queues
        ]
        widgets.append(graph("Batch failures: records given up on (messages waiting)", waiting))
    if outbox:
        widgets.append(
            graph(
                "Outbox: oldest unpublished event (seconds)",
                library([OUTBOX_AGE], "Maximum"),
                left_annotations=[
                    cloudwatch.HorizontalAnnotation(
                        value=OUTBOX_AGE_LIMIT_SECONDS, label="5 minutes"
                    )
                ],
            )
        )
        runs = [
            s.metric_invocations(
                statistic="Sum", period=Duration.minutes(15), label=f"{s.node.id} runs"
            )
            for s in sweepers
        ]
        widgets.append(graph("Outbox: events published", library(OUTBOX_COUNTS), right=runs))
    dashboard = cloudwatch.Dashboard(scope, id, dashboard_name=dashboard_name)
    for row in range(0, len(widgets), 2):
        dashboard.add_widgets(*widgets[row : row + 2])
    return dashboard
