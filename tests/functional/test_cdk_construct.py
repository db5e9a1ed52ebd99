"""The CDK construct (cdk/) read as source: what it grants; the library needs none of it.

Its synthesized templates are tested in cdk/tests (`make cdk-check`, in the CDK's own venv);
these checks read its source, so they run wherever the library's tests do.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.functional.test_template import IDEMPOTENCY_ACTIONS

ROOT = Path(__file__).resolve().parents[2]
CONSTRUCT = ROOT / "cdk" / "idempotent_lambda_cdk" / "_table.py"
OUTBOX = ROOT / "cdk" / "idempotent_lambda_cdk" / "_outbox.py"


def constants(path: Path) -> dict[str, object]:
    """Return the module-level constants of `path` that are literals."""
    found: dict[str, object] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                try:
                    found[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    continue
    return found


def test_the_construct_grants_what_the_template_grants() -> None:
    """The same item actions as template.yaml's functions, BatchGetItem for batches, S3 Get/Put."""
    values = constants(CONSTRUCT)
    assert tuple(IDEMPOTENCY_ACTIONS) == values["RECORD_ACTIONS"]
    assert ("dynamodb:BatchGetItem", "dynamodb:BatchWriteItem") == values["BATCH_ACTIONS"]
    assert ("s3:GetObject", "s3:PutObject") == values["LARGE_RESULT_ACTIONS"]


def test_the_construct_offloads_where_the_sample_app_does() -> None:
    """Both name `idempotency/` as the folder of every function's `<key_prefix>/`."""
    sample = constants(ROOT / "samples" / "app" / "aws.py")
    assert sample["LARGE_RESULTS_ROOT"] == constants(CONSTRUCT)["LARGE_RESULTS_ROOT"]


def test_the_library_never_imports_the_cdk() -> None:
    """No module of idempotent_lambda imports aws_cdk or constructs, even lazily."""
    for path in sorted((ROOT / "idempotent_lambda").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in {"aws_cdk", "constructs"}, path


def test_the_construct_ships_the_repository_licence() -> None:
    """cdk/LICENSE, which its distribution ships, is the repository's LICENSE."""
    assert (ROOT / "LICENSE").read_text(encoding="utf-8") == (ROOT / "cdk" / "LICENSE").read_text(
        encoding="utf-8"
    )


def test_the_construct_grants_the_outbox_what_the_template_grants() -> None:
    """Outbox keys as the library writes them; the publisher's actions as template.yaml grants
    them (tied to the store's calls in test_template_outbox.py)."""
    from idempotent_lambda._outbox_format import KEY_MARK
    from samples.local_stack import load_template

    values = constants(OUTBOX)
    assert KEY_MARK == values["OUTBOX_KEY_MARK"]
    functions = load_template()["Resources"]
    publisher = functions["PublishEventsFunction"]["Properties"]["Policies"][0]["Statement"]
    grants = {s["Sid"]: tuple(s["Action"]) for s in publisher}
    assert grants["MarkOutboxEventsPublished"] == values["PUBLISH_ACTIONS"]
    assert grants["ReadIdempotencyStream"] == values["STREAM_ACTIONS"]


def test_the_construct_names_the_outbox_s_index_as_the_template_does() -> None:
    """The sweeper's index: template.yaml's name, keys and projection (tied to the library in
    test_template_outbox.py); its Query the action both grant."""
    from samples.local_stack import load_template

    values = constants(OUTBOX)
    resources = load_template()["Resources"]
    (index,) = resources["IdempotencyTable"]["Properties"]["GlobalSecondaryIndexes"]
    assert index["IndexName"] == values["OUTBOX_INDEX"]
    assert [key["AttributeName"] for key in index["KeySchema"]] == [
        values["OUTBOX_PENDING_ATTRIBUTE"],
        values["OUTBOX_EMITTED_AT_ATTRIBUTE"],
    ]
    sweeper = resources["SweepOutboxFunction"]["Properties"]["Policies"][0]["Statement"]
    grants = {s["Sid"]: tuple(s["Action"]) for s in sweeper}
    assert grants["FindUnpublishedOutboxItems"] == values["SWEEP_ACTIONS"]
    assert grants["MarkOutboxEventsPublished"] == values["PUBLISH_ACTIONS"]
