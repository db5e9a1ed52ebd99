"""botocore's errors are read in one module: `idempotent_lambda.persistence._aws`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from idempotent_lambda.exceptions import IdempotencyPersistenceLayerError
from idempotent_lambda.persistence._aws import error_details, translate_errors

PACKAGE = Path(__file__).resolve().parents[2] / "idempotent_lambda"
BOUNDARY = PACKAGE / "persistence" / "_aws.py"


def _reads_error(node: ast.AST) -> bool:
    """``x["Error"]`` or ``x.get("Error", ...)``: a read of botocore's error in a response."""
    if isinstance(node, ast.Subscript):
        key = node.slice
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
    ):
        key = node.args[0]
    else:
        return False
    return isinstance(key, ast.Constant) and key.value == "Error"


def test_no_module_but_the_boundary_reads_botocores_error() -> None:
    """Every other module asks `_aws` for the code, never ``response["Error"]``."""
    readers = sorted(
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path in PACKAGE.rglob("*.py")
        if path != BOUNDARY
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if _reads_error(node)
    )
    assert [] == readers


def test_the_scan_sees_a_read() -> None:
    """The scan is not blind: the boundary itself reads the error."""
    tree = ast.parse(BOUNDARY.read_text(encoding="utf-8"))
    assert any(_reads_error(node) for node in ast.walk(tree))


def test_the_store_error_carries_the_aws_code() -> None:
    """A failed AWS call becomes the library's error, with AWS's code on it."""
    from botocore.exceptions import ClientError

    refused = ClientError(
        {"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "PutItem"
    )
    with (
        pytest.raises(IdempotencyPersistenceLayerError) as caught,
        translate_errors("DynamoDB", "PutItem"),
    ):
        raise refused
    assert "ThrottlingException" == caught.value.error_code
    assert ("ThrottlingException", "slow down") == error_details(refused)


def test_an_error_without_aws_behind_it_has_no_code() -> None:
    """The attribute is there on every store error; None when no AWS call failed."""
    assert None is IdempotencyPersistenceLayerError("lost").error_code
    assert (None, "") == error_details(ValueError("not botocore"))
