"""`idempotent-lambda doctor` against moto's server (and recorded answers where moto has none).

moto answers DescribeTable, DescribeTimeToLive, DescribeContinuousBackups, Application Auto
Scaling, IAM and Lambda as AWS does for a one-Region table. It accepts a replica but does not
report it: the global-table cases add the ``Replicas`` and ``MultiRegionConsistency`` fields of a
DescribeTable answer recorded in the shape AWS documents (`MREC`, `MRSC`) to moto's answer.
"""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import pytest

from idempotent_lambda.cli import _connection, main

#: What DescribeTable adds for a global table (2019.11.21), recorded in AWS's documented shape.
MREC = {
    "GlobalTableVersion": "2019.11.21",
    "Replicas": [
        {"RegionName": "eu-west-1", "ReplicaStatus": "ACTIVE"},
        {"RegionName": "us-west-2", "ReplicaStatus": "ACTIVE"},
    ],
    "MultiRegionConsistency": "EVENTUAL",
}
MRSC = {**MREC, "MultiRegionConsistency": "STRONG"}


@pytest.fixture
def doctor(capsys: pytest.CaptureFixture[str], dynamodb_endpoint: str) -> Any:
    def run(table: str, *options: str) -> tuple[int, str]:
        code = main(["doctor", "--table", table, "--endpoint-url", dynamodb_endpoint, *options])
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err
        return code, captured.out

    return run


def statuses(out: str) -> dict[str, str]:
    lines = [line for line in out.splitlines() if not line.startswith(" ")]
    return {line[6:].split(":", 1)[0]: line[:5].strip() for line in lines}


@pytest.fixture
def unprotect(dynamodb_client: Any) -> Any:
    names: list[str] = []
    yield names.append
    for name in names:  # so the tables can be deleted after the test
        dynamodb_client.update_table(TableName=name, DeletionProtectionEnabled=False)


def test_a_healthy_table_passes_every_check(
    doctor: Any, dynamodb_client: Any, make_table: Any, unprotect: Any
) -> None:
    """On demand, TTL on the expiry attribute, PITR, deletion protection, one Region."""
    name = make_table()
    dynamodb_client.update_continuous_backups(
        TableName=name, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
    )
    dynamodb_client.update_table(TableName=name, DeletionProtectionEnabled=True)
    unprotect(name)

    code, out = doctor(name)

    assert 0 == code
    assert {
        "key schema": "ok",
        "time to live": "ok",
        "point-in-time recovery": "ok",
        "deletion protection": "ok",
        "capacity": "ok",
        "global table": "ok",
    } == statuses(out)


def test_a_table_without_ttl_is_warned_about_with_the_fix(
    doctor: Any, dynamodb_client: Any
) -> None:
    """No TTL: a warning that names the command enabling it on the expiry attribute."""
    name = "doctor-no-ttl"
    dynamodb_client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    try:
        code, out = doctor(name)
    finally:
        dynamodb_client.delete_table(TableName=name)

    assert 0 == code  # warnings only
    assert "warn" == statuses(out)["time to live"]
    assert f"--table-name {name} " in out
    assert "AttributeName=expiration" in out


def test_a_table_keyed_otherwise_fails_and_exits_1(doctor: Any, make_table: Any) -> None:
    """The store would write `id` into a table keyed `pk`: a fail, and exit code 1."""
    name = make_table(key_attr="pk")

    code, out = doctor(name)

    assert 1 == code
    assert "fail" == statuses(out)["key schema"]
    assert "pk (S)" in out
    assert "id (S)" in out


def test_a_composite_key_table_matches_its_options(doctor: Any, make_table: Any) -> None:
    """With --sort-key-attr the store's composite key is what is checked."""
    name = make_table(key_attr="id", sort_key_attr="sort_key")

    assert 1 == doctor(name)[0]
    code, out = doctor(name, "--sort-key-attr", "sort_key", "--static-pk-value", "p")
    assert 0 == code
    assert "ok" == statuses(out)["key schema"]


def test_provisioned_capacity_needs_auto_scaling(
    doctor: Any, dynamodb_client: Any, dynamodb_endpoint: str
) -> None:
    """Provisioned without auto scaling warns; with both dimensions registered it is ok."""
    import boto3

    name = "doctor-provisioned"
    dynamodb_client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        ProvisionedThroughput={"ReadCapacityUnits": 5, "WriteCapacityUnits": 5},
    )
    try:
        before = statuses(doctor(name)[1])["capacity"]
        scaling = boto3.client(
            "application-autoscaling", endpoint_url=dynamodb_endpoint, region_name="us-east-1"
        )
        for dimension in ("ReadCapacityUnits", "WriteCapacityUnits"):
            scaling.register_scalable_target(
                ServiceNamespace="dynamodb",
                ResourceId=f"table/{name}",
                ScalableDimension=f"dynamodb:table:{dimension}",
                MinCapacity=5,
                MaxCapacity=100,
            )
        after = statuses(doctor(name)[1])["capacity"]
    finally:
        dynamodb_client.delete_table(TableName=name)

    assert ("warn", "ok") == (before, after)


@pytest.mark.parametrize(("recorded", "expected"), [(MREC, "warn"), (MRSC, "ok")])
def test_global_tables_are_read_from_their_consistency_mode(
    doctor: Any,
    make_table: Any,
    monkeypatch: pytest.MonkeyPatch,
    recorded: dict[str, Any],
    expected: str,
) -> None:
    """MREC: the warning that two Regions can both run one request; MRSC: ok."""
    name = make_table()
    build = _connection.client_from

    def client_answering_as_a_global_table(args: Any) -> Any:
        client = build(args)
        describe = client.describe_table

        def described(**kwargs: Any) -> Any:
            answer = describe(**kwargs)
            answer["Table"].update(recorded)
            return answer

        client.describe_table = described
        return client

    monkeypatch.setattr(_connection, "client_from", client_answering_as_a_global_table)

    code, out = doctor(name)

    assert 0 == code
    assert expected == statuses(out)["global table"]
    if expected == "warn":
        assert "two Regions can both run one request; use MRSC or route each key" in out


def test_a_role_is_checked_against_the_iam_page(
    doctor: Any, make_table: Any, dynamodb_client: Any, dynamodb_endpoint: str
) -> None:
    """--role and --function: the table actions docs/iam.md lists, with a fail when missing."""
    import boto3

    name = make_table()
    arn = dynamodb_client.describe_table(TableName=name)["Table"]["TableArn"]
    iam = boto3.client("iam", endpoint_url=dynamodb_endpoint, region_name="us-east-1")
    role = iam.create_role(
        RoleName=f"role-{name}",
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
    )["Role"]["Arn"]

    def grant(*actions: str) -> None:
        document = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": list(actions), "Resource": arn}],
        }
        iam.put_role_policy(
            RoleName=f"role-{name}", PolicyName="idempotency", PolicyDocument=json.dumps(document)
        )

    grant("dynamodb:GetItem", "dynamodb:PutItem")
    code, out = doctor(name, "--role", role)
    assert 1 == code
    assert "fail" == statuses(out)["permissions"]
    assert "dynamodb:DeleteItem" in out

    grant("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:BatchGetItem")
    code, out = doctor(name, "--role", role)
    assert 0 == code
    assert "warn" == statuses(out)["permissions (batches)"]
    assert "not allowed dynamodb:BatchWriteItem: batch handlers write each completion" in out

    grant(
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:DeleteItem",
        "dynamodb:BatchGetItem",
        "dynamodb:BatchWriteItem",
    )
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as files:
        files.writestr("app.py", "def handler(event, context):\n    return event\n")
    boto3.client("lambda", endpoint_url=dynamodb_endpoint, region_name="us-east-1").create_function(
        FunctionName=f"fn-{name}",
        Runtime="python3.12",
        Role=role,
        Handler="app.handler",
        Code={"ZipFile": archive.getvalue()},
    )
    code, out = doctor(name, "--function", f"fn-{name}", "--json")
    found = {line["check"]: line["status"] for line in map(json.loads, out.splitlines())}
    assert 0 == code
    assert "ok" == found["permissions"]
    assert "permissions (batches)" not in found
