"""One synthesis for the whole suite: the example app and the construct's test stacks, together.

Synthesizing runs the CDK's JavaScript in Node (through jsii); it is the slow part, so one
session fixture does it once and the tests read the templates it wrote.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template

from idempotent_lambda_cdk import IdempotencyTable

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cdk" / "app.py"


def load_example() -> Any:
    """Import examples/cdk/app.py as a module."""
    spec = importlib.util.spec_from_file_location("cdk_example_app", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def python_function(scope: cdk.Stack, name: str) -> lambda_.Function:
    return lambda_.Function(
        scope,
        name,
        runtime=lambda_.Runtime.PYTHON_3_13,
        handler="app.handler",
        code=lambda_.Code.from_inline("def handler(event, context):\n    return event\n"),
    )


@dataclass(frozen=True)
class Synthesized:
    """What the session synthesized: the cloud assembly folder and each stack's template."""

    outdir: Path
    templates: dict[str, dict[str, Any]]

    def template(self, stack: str) -> Template:
        return Template.from_json(self.templates[stack])


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """Synthesize the example app and three stacks that use the construct, once."""
    outdir = tmp_path_factory.mktemp("cdk.out")
    bundle = tmp_path_factory.mktemp("bundle")
    (bundle / "placeholder.txt").write_text("the handlers and their requirements go here\n")
    app = cdk.App(outdir=str(outdir))
    load_example().build(app, str(bundle))

    with_bucket = cdk.Stack(app, "WithBucket")
    table = IdempotencyTable(
        with_bucket, "Idempotency", large_results=True, record_expiry=cdk.Duration.hours(36)
    )
    table.grant_idempotency(
        python_function(with_bucket, "Http"), key_prefix="orders.create", offload=True
    )
    table.grant_idempotency(
        python_function(with_bucket, "Batch"), key_prefix="orders.pay", batch=True, offload=True
    )
    table.grant_idempotency(python_function(with_bucket, "Small"), key_prefix="orders.small")

    nested = cdk.Stack(app, "NestedPrefixes")  # one prefix's folder inside the other's
    shared = IdempotencyTable(nested, "Idempotency", large_results=True)
    shared.grant_idempotency(python_function(nested, "Orders"), key_prefix="orders", offload=True)
    shared.grant_idempotency(python_function(nested, "Eu"), key_prefix="orders/eu", offload=True)

    table_only = cdk.Stack(app, "TableOnly")
    plain = IdempotencyTable(table_only, "Idempotency", table_name="idempotency")
    plain.grant_idempotency(python_function(table_only, "Http"), key_prefix="orders.create")
    plain.add_dashboard(namespace="Orders", dimensions={"service": "orders"})

    assembly = app.synth()
    templates = {
        stack.stack_name: json.loads(Path(stack.template_full_path).read_text(encoding="utf-8"))
        for stack in assembly.stacks
    }
    return Synthesized(outdir, templates)
