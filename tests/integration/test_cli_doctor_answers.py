"""`doctor` on hostile and broken AWS answers, crafted by an endpoint of the tests' own.

DynamoDB allows any UTF-8 in attribute names, and a Region, a role's ARN or an emulator's answer
can hold anything too: whatever an answer holds reaches the terminal escaped, or doctor stops
with exit 2 naming the API and the field it could not use. Every client doctor builds is pointed
at `CraftedAws` through ``--endpoint-url``, so boto3 parses each answer as it parses AWS's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from idempotent_lambda.cli import main
from tests.integration._crafted_aws import CraftedAws

#: A title change (OSC), a screen clear (CSI), a C1 CSI and a right-to-left override.
HOSTILE = "\x1b]0;owned\x07\x1b[2J\x9b31m\u202eevil"
#: What reaches the terminal in its place: every control written out.
SHOWN = "\\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\u202eevil"
#: Any character that could act on a terminal instead of being shown.
UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def doctor(crafted: CraftedAws, capsys: pytest.CaptureFixture[str], *options: str) -> Any:
    code = main(["doctor", "--table", "crafted", "--endpoint-url", crafted.url, *options])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def table(crafted: CraftedAws) -> dict[str, Any]:
    found: dict[str, Any] = crafted.answers["DescribeTable"]["Table"]
    return found


PLACES: dict[str, Callable[[CraftedAws], None]] = {
    "replica RegionName": lambda c: table(c).update(
        Replicas=[{"RegionName": HOSTILE}, {"RegionName": "us-west-2"}]
    ),
    "KeySchema AttributeName": lambda c: (
        table(c)["KeySchema"][0].update(AttributeName=HOSTILE),
        table(c)["AttributeDefinitions"][0].update(AttributeName=HOSTILE),
    ),
    "AttributeDefinitions AttributeType": lambda c: table(c)["AttributeDefinitions"][0].update(
        AttributeType=HOSTILE
    ),
    "DescribeTimeToLive AttributeName": lambda c: c.answers["DescribeTimeToLive"][
        "TimeToLiveDescription"
    ].update(AttributeName=HOSTILE),
    "function Role": lambda c: c.answers["GetFunctionConfiguration"].update(
        Role=f"arn:aws:iam::123456789012:role/{HOSTILE}"
    ),
}


def test_the_crafted_table_is_healthy(
    crafted_aws: CraftedAws, capsys: pytest.CaptureFixture[str]
) -> None:
    """The baseline every other test edits: all checks pass, every API was asked."""
    code, out, err = doctor(crafted_aws, capsys, "--function", "orders")

    assert (0, "") == (code, err)
    assert 7 == len(out.splitlines())
    assert {"DescribeTable", "GetFunctionConfiguration", "GetRolePolicy"} <= set(crafted_aws.asked)


@pytest.mark.parametrize("place", PLACES)
def test_every_answer_field_reaches_the_terminal_escaped(
    crafted_aws: CraftedAws, capsys: pytest.CaptureFixture[str], place: str
) -> None:
    """Controls and bidi characters in an answer are written out, never sent to the terminal.

    --json stays safe too, and its lines parse back to the very text of the answer.
    """
    PLACES[place](crafted_aws)

    code, out, err = doctor(crafted_aws, capsys, "--function", "orders")
    json_code, json_out, json_err = doctor(crafted_aws, capsys, "--function", "orders", "--json")

    assert [None] * 4 == [UNSAFE.search(text) for text in (out, err, json_out, json_err)]
    assert SHOWN in out
    details = [json.loads(line)["detail"] for line in json_out.splitlines()]
    assert any(HOSTILE in detail for detail in details)
    assert code == json_code
    assert code in (0, 1)


def _policy(statement: Any) -> Callable[[CraftedAws], None]:
    return lambda c: c.answers["GetRolePolicy"].update(
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statement})
    )


MALFORMED: dict[str, tuple[Callable[[CraftedAws], None], str]] = {
    "no Table": (
        lambda c: c.answers.update(DescribeTable={}),
        "DescribeTable's answer is unusable: Table is missing",
    ),
    "answer not an object": (
        lambda c: c.answers.update(DescribeTable=["crafted"]),
        "DescribeTable's answer is unusable: the answer is a list, not an object",
    ),
    "Table not an object": (
        lambda c: c.answers.update(DescribeTable={"Table": "crafted"}),
        "DescribeTable's answer is unusable: Table is a string, not an object",
    ),
    "KeySchema not a list": (
        lambda c: table(c).update(KeySchema={"AttributeName": "id"}),
        "DescribeTable's answer is unusable: Table.KeySchema is an object, not a list",
    ),
    "AttributeName a number": (
        lambda c: table(c)["KeySchema"][0].update(AttributeName=7),
        "DescribeTable's answer is unusable: Table.KeySchema[0].AttributeName is a number, "
        "not a string",
    ),
    "replica without RegionName": (
        lambda c: table(c).update(Replicas=[{"RegionName": "eu-west-1"}, {}]),
        "DescribeTable's answer is unusable: Table.Replicas[1].RegionName is missing",
    ),
    "throughput a hostile string": (
        lambda c: table(c).update(
            BillingModeSummary={"BillingMode": "PROVISIONED"},
            ProvisionedThroughput={"ReadCapacityUnits": HOSTILE, "WriteCapacityUnits": 5},
        ),
        "DescribeTable's answer is unusable: Table.ProvisionedThroughput.ReadCapacityUnits is "
        "a string, not a number",
    ),
    "TTL attribute a list": (
        lambda c: c.answers["DescribeTimeToLive"]["TimeToLiveDescription"].update(
            AttributeName=["expiration"]
        ),
        "DescribeTimeToLive's answer is unusable: TimeToLiveDescription.AttributeName is a "
        "list, not a string",
    ),
    "scalable dimension missing": (
        lambda c: (
            table(c).update(BillingModeSummary={"BillingMode": "PROVISIONED"}),
            c.answers.update(DescribeScalableTargets={"ScalableTargets": [{}]}),
        ),
        "DescribeScalableTargets's answer is unusable: ScalableTargets[0].ScalableDimension "
        "is missing",
    ),
    "no Role": (
        lambda c: c.answers.update(GetFunctionConfiguration={}),
        "GetFunctionConfiguration's answer is unusable: Role is missing",
    ),
    "policy not JSON": (
        lambda c: c.answers["GetRolePolicy"].update(PolicyDocument="{not json"),
        "GetRolePolicy's answer is unusable: its policy document is not JSON",
    ),
    "statement Action a number": (
        _policy([{"Effect": "Allow", "Action": 5, "Resource": "*"}]),
        "GetRolePolicy's answer is unusable: Statement[0].Action is a number, not a string or "
        "a list of strings",
    ),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_answer_exits_2_naming_the_api_and_the_field(
    crafted_aws: CraftedAws, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    """No check is printed from an answer doctor cannot read; the error says where and why."""
    change, message = MALFORMED[case]
    change(crafted_aws)

    code, out, err = doctor(crafted_aws, capsys, "--function", "orders")

    assert (2, "", f"idempotent-lambda: error: {message}\n") == (code, out, err)
