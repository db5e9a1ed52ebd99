"""IdempotencyTable and grant_idempotency, read from the templates they synthesize."""

from __future__ import annotations

import re
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match

from idempotent_lambda_cdk import IdempotencyTable, large_result_prefix

from .conftest import Synthesized, python_function

RECORD_ACTIONS = ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem"]
BATCH_ACTIONS = ["dynamodb:BatchGetItem", "dynamodb:BatchWriteItem"]


def statements(template: dict[str, Any]) -> list[dict[str, Any]]:
    """Every statement of every IAM policy of a template."""
    return [
        statement
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::IAM::Policy"
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
    ]


def granted_to(template: dict[str, Any], function: str) -> list[dict[str, Any]]:
    """The statements of the default policy of `function`'s role."""
    found = []
    for name, resource in template["Resources"].items():
        if resource["Type"] == "AWS::IAM::Policy" and name.startswith(f"{function}ServiceRole"):
            found.extend(resource["Properties"]["PolicyDocument"]["Statement"])
    assert found, function
    return found


def test_the_table_has_the_store_layout_and_is_kept(synthesized: Synthesized) -> None:
    """Partition key id (S), TTL on expiration, on demand, PITR, encryption, retained."""
    synthesized.template("WithBucket").has_resource(
        "AWS::DynamoDB::Table",
        {
            "DeletionPolicy": "Retain",
            "UpdateReplacePolicy": "Retain",
            "Properties": {
                "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}],
                "AttributeDefinitions": [{"AttributeName": "id", "AttributeType": "S"}],
                "TimeToLiveSpecification": {"AttributeName": "expiration", "Enabled": True},
                "BillingMode": "PAY_PER_REQUEST",
                "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
                "SSESpecification": {"SSEEnabled": True},
                "DeletionProtectionEnabled": True,
            },
        },
    )


def test_the_bucket_is_private_tls_only_and_expires_with_the_records(
    synthesized: Synthesized,
) -> None:
    """Every public access block, SSE, ACLs off, no versions; objects go ceil(36 h) = 2 days on."""
    template = synthesized.template("WithBucket")
    template.has_resource(
        "AWS::S3::Bucket",
        {
            "DeletionPolicy": "Retain",
            "Properties": {
                "PublicAccessBlockConfiguration": {
                    "BlockPublicAcls": True,
                    "BlockPublicPolicy": True,
                    "IgnorePublicAcls": True,
                    "RestrictPublicBuckets": True,
                },
                "BucketEncryption": {
                    "ServerSideEncryptionConfiguration": [
                        {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
                    ]
                },
                "OwnershipControls": {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]},
                "LifecycleConfiguration": {
                    "Rules": [
                        Match.object_like(
                            {
                                "Prefix": "idempotency/",
                                "ExpirationInDays": 2,
                                "Status": "Enabled",
                                "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
                            }
                        )
                    ]
                },
                "VersioningConfiguration": Match.absent(),
            },
        },
    )
    template.has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Action": "s3:*",
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        )
                    ]
                )
            }
        },
    )


def test_a_grant_is_exactly_the_store_calls_on_the_function_keys(
    synthesized: Synthesized,
) -> None:
    """GetItem, PutItem, DeleteItem on the table, only for keys under `{key_prefix}#`."""
    (statement, on_objects) = granted_to(synthesized.templates["WithBucket"], "Http")
    assert {"Action", "Condition", "Effect", "Resource"} == set(statement)
    assert RECORD_ACTIONS == statement["Action"]
    leading = {"dynamodb:LeadingKeys": ["orders.create#*"]}
    assert {"ForAllValues:StringLike": leading} == statement["Condition"]
    (table, attribute) = statement["Resource"]["Fn::GetAtt"]
    assert (True, "Arn") == (table.startswith("IdempotencyTable"), attribute)
    assert ["s3:GetObject", "s3:PutObject"] == on_objects["Action"]
    assert (
        "/idempotency/orders.create/orders.create%23*" == on_objects["Resource"]["Fn::Join"][1][-1]
    )
    assert "Condition" not in on_objects


def test_a_batch_grant_adds_the_batch_read_only(synthesized: Synthesized) -> None:
    """A batch handler also gets BatchGetItem and BatchWriteItem, on its own keys; its objects
    are its own."""
    (statement, on_objects) = granted_to(synthesized.templates["WithBucket"], "Batch")
    assert [*RECORD_ACTIONS, *BATCH_ACTIONS] == statement["Action"]
    assert ["orders.pay#*"] == statement["Condition"]["ForAllValues:StringLike"][
        "dynamodb:LeadingKeys"
    ]
    objects = on_objects["Resource"]["Fn::Join"][1][-1]
    assert f"/{large_result_prefix('orders.pay')}orders.pay%23*" == objects


def test_without_the_bucket_there_is_no_s3_grant(synthesized: Synthesized) -> None:
    """Table only: the named table, no bucket, and the function gets no S3 action at all."""
    template = synthesized.templates["TableOnly"]
    types = {resource["Type"] for resource in template["Resources"].values()}
    assert "AWS::S3::Bucket" not in types
    synthesized.template("TableOnly").has_resource_properties(
        "AWS::DynamoDB::Table", {"TableName": "idempotency"}
    )
    (statement,) = granted_to(template, "Http")
    assert RECORD_ACTIONS == statement["Action"]
    assert not [s for s in statements(template) if "s3:" in str(s["Action"])]


@pytest.mark.parametrize(
    "key_prefix", ["", "orders*", "orders?", "orders#x", "or ders", "orders%23x"]
)
def test_a_key_prefix_that_would_widen_the_grant_is_refused(key_prefix: str) -> None:
    """Wildcards, `#`, `%` and whitespace cannot be a key prefix of a grant."""
    stack = cdk.Stack(cdk.App(), "Refused")
    table = IdempotencyTable(stack, "Idempotency")
    with pytest.raises(ValueError, match="key_prefix"):
        table.grant_idempotency(python_function(stack, "F"), key_prefix=key_prefix)


def test_only_functions_that_offload_get_s3(synthesized: Synthesized) -> None:
    """A function granted without `offload` gets the record actions and no S3 action."""
    template = synthesized.templates["WithBucket"]
    small = [s for s in statements(template) if "orders.small#*" in str(s)]
    assert 1 == len(small)
    role = next(
        name
        for name, resource in template["Resources"].items()
        if resource["Type"] == "AWS::IAM::Policy" and "orders.small#*" in str(resource)
    )
    assert "s3:" not in str(template["Resources"][role])


def test_the_grant_names_the_key_prefix_in_the_function_environment(
    synthesized: Synthesized,
) -> None:
    """The granted function gets the variable the library checks, naming its prefix."""
    from idempotent_lambda_cdk._table import GRANTED_KEY_PREFIXES_ENV

    functions = {
        name: resource["Properties"].get("Environment", {}).get("Variables", {})
        for name, resource in synthesized.templates["WithBucket"]["Resources"].items()
        if resource["Type"] == "AWS::Lambda::Function"
    }
    granted = sorted(variables.get(GRANTED_KEY_PREFIXES_ENV) for variables in functions.values())
    assert ["orders.create", "orders.pay", "orders.small"] == granted


def test_offload_without_the_bucket_is_refused() -> None:
    """`offload=True` on a table without the bucket cannot grant anything: ValueError."""
    stack = cdk.Stack(cdk.App(), "NoBucket")
    table = IdempotencyTable(stack, "Idempotency")
    with pytest.raises(ValueError, match="large_results=True"):
        table.grant_idempotency(python_function(stack, "F"), key_prefix="p", offload=True)


def iam_matches(pattern: str, key: str) -> bool:
    """Tell whether an IAM resource pattern names `key` (`*`: any run, `?`: any one character)."""
    parts = [re.escape(part) for part in pattern.split("*")]
    return re.fullmatch(".*".join(p.replace(r"\?", ".") for p in parts), key) is not None


def test_a_prefix_nested_in_another_s_folder_is_outside_its_grant(
    synthesized: Synthesized,
) -> None:
    """`orders` and `orders/eu`: each grant names its own objects only, old and new alike.

    The objects are named as the library names them (tests/integration/
    test_large_results_grants.py writes them through the library and checks the same rule).
    """
    template = synthesized.templates["NestedPrefixes"]
    granted = {}
    for function in ("Orders", "Eu"):
        (_, on_objects) = granted_to(template, function)
        assert ["s3:GetObject", "s3:PutObject"] == on_objects["Action"]
        granted[function] = on_objects["Resource"]["Fn::Join"][1][-1].lstrip("/")
    assert {
        "Orders": "idempotency/orders/orders%23*",
        "Eu": "idempotency/orders/eu/orders%2Feu%23*",
    } == granted
    owner, digest = "0123456789abcdef0123456789abcdef", "ab" * 32
    objects = {
        "Orders": f"idempotency/orders/orders%23{digest}/{owner}",
        "Eu": f"idempotency/orders/eu/orders%2Feu%23{digest}/{owner}",
    }
    for function, pattern in granted.items():
        assert [function] == [name for name, key in objects.items() if iam_matches(pattern, key)]
