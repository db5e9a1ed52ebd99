"""examples/cdk/app.py synthesizes to templates that cfn-lint accepts, with the grants it shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from aws_cdk.assertions import Match

from .conftest import Synthesized
from .test_idempotency_table import BATCH_ACTIONS, RECORD_ACTIONS, granted_to

CFN_LINT = Path(sys.executable).parent / "cfn-lint"


def test_every_synthesized_template_passes_cfn_lint(synthesized: Synthesized) -> None:
    """cfn-lint finds no error and no warning.

    Two things the CDK writes into every template are left out: its `Fn::Join` where
    template.yaml would use `Fn::Sub` (I1022; informational checks stay off), and a
    `DependsOn` on the function's role beside the `GetAtt` of it (W3005).
    """
    templates = sorted(str(path) for path in synthesized.outdir.glob("*.template.json"))
    assert 4 == len(templates), templates
    result = subprocess.run(
        [CFN_LINT, "--ignore-checks", "W3005", "--regions", "us-east-1", "--", *templates],
        capture_output=True,
        text=True,
        check=False,
    )
    assert 0 == result.returncode, result.stdout + result.stderr


def test_the_example_grants_each_function_its_own_records(synthesized: Synthesized) -> None:
    """CreateOrder: its keys (which hold its outbox items too) and objects, and PutItem on the
    orders; the payment one batches."""
    template = synthesized.templates["IdempotentOrders"]
    create = granted_to(template, "CreateOrder")
    leading = [s["Condition"]["ForAllValues:StringLike"] for s in create if "Condition" in s]
    assert [{"dynamodb:LeadingKeys": ["orders.create_order#*"]}] == leading
    assert RECORD_ACTIONS in [s["Action"] for s in create]
    assert "dynamodb:PutItem" in [s["Action"] for s in create]
    pay = granted_to(template, "ProcessPayment")
    assert [*RECORD_ACTIONS, *BATCH_ACTIONS] in [s["Action"] for s in pay]


def test_the_example_api_needs_a_token_and_the_queue_reports_partial_failures(
    synthesized: Synthesized,
) -> None:
    """POST /orders has the user pool's JWT authorizer; the SQS mapping reports items."""
    template = synthesized.template("IdempotentOrders")
    template.has_resource_properties("AWS::ApiGatewayV2::Authorizer", {"AuthorizerType": "JWT"})
    template.has_resource_properties(
        "AWS::ApiGatewayV2::Route",
        {"RouteKey": "POST /orders", "AuthorizationType": "JWT", "AuthorizerId": Match.any_value()},
    )
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {"FunctionResponseTypes": ["ReportBatchItemFailures"], "BatchSize": 10},
    )
