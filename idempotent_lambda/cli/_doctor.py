"""`idempotent-lambda doctor`: check that a table is fit to hold idempotency records.

The checks are plain functions of what AWS answers (DescribeTable, DescribeTimeToLive,
DescribeContinuousBackups, Application Auto Scaling's scalable targets, a role's policies), so
each can be tested on an answer recorded from AWS where a local server gives none. `run_doctor`
asks AWS and prints one line per check (`text`, which escapes every field: answers may hold
any text), or JSON Lines with ``--json``; any ``fail`` makes the exit code 1. An answer without
a field the checks read, or with one of the wrong type, exits 2 naming the API and the field
(`idempotent_lambda.cli._answers`).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, replace
from typing import Any
from urllib.parse import unquote

from idempotent_lambda.cli import _answers, _connection
from idempotent_lambda.cli._answers import ask
from idempotent_lambda.cli._connection import other_client
from idempotent_lambda.cli._outbox import outbox_checks
from idempotent_lambda.cli._output import FAIL, WARN, Check, CliError, Screen, text
from idempotent_lambda.cli._output import OK_CHECK as OK
from idempotent_lambda.persistence._aws import error_details

#: What every decorated function calls on the table (docs/iam.md), and what batches add.
REQUIRED_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem")
#: What a batch handler loses without each batch action (it still works, at more requests).
BATCH_ACTIONS = {
    "dynamodb:BatchGetItem": "batch handlers fall back to one claim per record on redelivery",
    "dynamodb:BatchWriteItem": "batch handlers write each completion with a PutItem of its own "
    "(about two requests per record instead of one)",
}
MREC_WARNING = (
    "multi-Region eventual consistency (MREC): two Regions can both run one request; "
    "use MRSC or route each key to one Region"
)


def key_schema(table: Mapping[str, Any], key_attr: str, sort_key_attr: str | None) -> Check:
    """The table's keys are the store's: ``key_attr`` (S), and ``sort_key_attr`` (S) if set."""
    keys = {k["KeyType"]: k["AttributeName"] for k in table.get("KeySchema", [])}
    types = {a["AttributeName"]: a["AttributeType"] for a in table.get("AttributeDefinitions", [])}
    wanted = {"HASH": key_attr, **({"RANGE": sort_key_attr} if sort_key_attr else {})}
    shown = ", ".join(f"{keys[kind]} ({types.get(keys[kind], '?')})" for kind in sorted(keys))
    if keys != wanted or any(types.get(name) != "S" for name in wanted.values()):
        expected = ", ".join(f"{name} (S)" for _, name in sorted(wanted.items()))
        return Check(
            "key schema",
            FAIL,
            f"the table's keys are {shown}; the store writes {expected}",
            "pass the table's key names as --key-attr/--sort-key-attr (and to "
            "DynamoDBPersistenceLayer), or use a table keyed as the store expects",
        )
    return Check("key schema", OK, f"keys {shown} match the store")


def time_to_live(ttl: Mapping[str, Any], expiry_attr: str) -> Check:
    """TTL deletes records by the store's expiry attribute (expiry is also checked in code)."""
    status = ttl.get("TimeToLiveStatus", "DISABLED")
    attribute = ttl.get("AttributeName")
    fix = (
        f"aws dynamodb update-time-to-live --table-name <table> --time-to-live-specification "
        f"Enabled=true,AttributeName={expiry_attr}"
    )
    if status in ("ENABLED", "ENABLING") and attribute == expiry_attr:
        return Check("time to live", OK, f"{status.lower()} on {expiry_attr}")
    if status in ("ENABLED", "ENABLING"):
        return Check(
            "time to live",
            WARN,
            f"on {attribute}, not on the expiry attribute {expiry_attr}: expired records stay",
            fix,
        )
    return Check(
        "time to live",
        WARN,
        "off: expired records are never deleted and the table only grows (expiry itself is "
        "checked in code, so nothing replays late)",
        fix,
    )


def recovery(backups: Mapping[str, Any], table: Mapping[str, Any]) -> list[Check]:
    """Point-in-time recovery and deletion protection keep the records through mistakes."""
    pitr = (
        backups.get("ContinuousBackupsDescription", {})
        .get("PointInTimeRecoveryDescription", {})
        .get("PointInTimeRecoveryStatus", "DISABLED")
    )
    checks = [
        Check("point-in-time recovery", OK, "enabled")
        if pitr == "ENABLED"
        else Check(
            "point-in-time recovery",
            WARN,
            "off: a table damaged or deleted by mistake cannot be restored, and every request "
            "it remembered would run again",
            "aws dynamodb update-continuous-backups --table-name <table> "
            "--point-in-time-recovery-specification PointInTimeRecoveryEnabled=true",
        )
    ]
    if table.get("DeletionProtectionEnabled"):
        checks.append(Check("deletion protection", OK, "enabled"))
    else:
        checks.append(
            Check(
                "deletion protection",
                WARN,
                "off: deleting the table forgets every request it protects",
                "aws dynamodb update-table --table-name <table> --deletion-protection-enabled",
            )
        )
    return checks


def capacity(table: Mapping[str, Any], scalable: Iterable[str]) -> Check:
    """On demand, or provisioned with auto scaling of both reads and writes."""
    mode = table.get("BillingModeSummary", {}).get("BillingMode", "PROVISIONED")
    if mode == "PAY_PER_REQUEST":
        return Check("capacity", OK, "on demand")
    missing = {"dynamodb:table:ReadCapacityUnits", "dynamodb:table:WriteCapacityUnits"} - set(
        scalable
    )
    throughput = table.get("ProvisionedThroughput", {})
    shown = f"{throughput.get('ReadCapacityUnits', '?')} RCU / "
    shown += f"{throughput.get('WriteCapacityUnits', '?')} WCU"
    if missing:
        return Check(
            "capacity",
            WARN,
            f"provisioned ({shown}) without auto scaling of "
            + " and ".join(sorted(name.rsplit(":", 1)[1] for name in missing))
            + ": a burst is throttled, and throttled claims fail their requests",
            "switch to on demand (--billing-mode PAY_PER_REQUEST) or register auto scaling",
        )
    return Check("capacity", OK, f"provisioned ({shown}) with auto scaling")


def global_table(table: Mapping[str, Any]) -> Check:
    """A global table's consistency mode: MRSC is safe, MREC lets two Regions both claim."""
    replicas = [r.get("RegionName", "?") for r in table.get("Replicas", [])]
    if not replicas:
        return Check("global table", OK, "one Region (not a global table)")
    regions = ", ".join(sorted(replicas))
    if table.get("MultiRegionConsistency") == "STRONG":
        return Check(
            "global table",
            OK,
            f"multi-Region strong consistency (MRSC) across {regions}: a claim is seen in "
            "every Region; a concurrent write is retried as contention",
        )
    return Check(
        "global table",
        WARN,
        f"{MREC_WARNING} (replicas: {regions})",
        "create the table with MultiRegionConsistency=STRONG, or send each key's requests to "
        "one Region (see the Multi-Region page)",
    )


def permissions(statements: Iterable[Mapping[str, Any]], table_arn: str, role: str) -> list[Check]:
    """What the role's Allow statements grant on the table, against docs/iam.md."""
    statements = list(statements)

    def allowed(action: str) -> bool:
        for statement in statements:
            if statement.get("Effect") != "Allow":
                continue
            actions = _as_list(statement.get("Action"))
            resources = _as_list(statement.get("Resource"))
            if any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in actions) and any(
                fnmatch.fnmatchcase(table_arn, r) for r in resources
            ):
                return True
        return False

    missing = [action for action in REQUIRED_ACTIONS if not allowed(action)]
    checks = []
    if missing:
        checks.append(
            Check(
                "permissions",
                FAIL,
                f"{role} is not allowed {', '.join(missing)} on the table: claims fail with "
                "AccessDenied",
                "grant the actions docs/iam.md lists (the CDK construct's grant_idempotency "
                "does), on the table's ARN",
            )
        )
    else:
        checks.append(
            Check("permissions", OK, f"{role} may {', '.join(REQUIRED_ACTIONS)} on the table")
        )
    for action, cost in BATCH_ACTIONS.items():
        if not allowed(action):
            checks.append(
                Check(
                    "permissions (batches)",
                    WARN,
                    f"{role} is not allowed {action}: {cost}",
                    f"grant {action} on the table to batch handlers",
                )
            )
    if any(statement.get("Effect") == "Deny" for statement in statements):
        checks.append(
            Check(
                "permissions (deny)",
                WARN,
                f"{role} has Deny statements, which this check does not evaluate",
                None,
            )
        )
    return checks


def _role_checks(args: argparse.Namespace, client: Any, table_arn: str) -> list[Check]:
    """`permissions` of ``--role`` (or ``--function``'s role); a refused read is a finding."""
    from botocore.exceptions import ClientError

    try:
        role = args.role or _role_of_function(args, client)
        if not role:
            return []
        return permissions(_role_statements(args, client, role), table_arn, role)
    except ClientError as exc:
        code = error_details(exc)[0] or "error"
        return [
            Check(
                "permissions",
                WARN,
                f"could not read the role's policies: {code} on "
                f"{exc.operation_name}; the role's grants were not checked",
                "allow doctor's role iam:ListRolePolicies, iam:GetRolePolicy, "
                "iam:ListAttachedRolePolicies, iam:GetPolicy, iam:GetPolicyVersion (and "
                "lambda:GetFunctionConfiguration with --function)",
            )
        ]


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


# --- asking AWS ------------------------------------------------------------------------------


def run_doctor(args: argparse.Namespace, screen: Screen) -> int:
    """Check the table (and the role of ``--role``/``--function``); exit 1 on any fail.

    Raises:
        CliError: An answer lacks a field the checks read, or holds one of the wrong type.
    """
    client = _connection.client_from(args)  # looked up at each run: tests stand in for it
    named = {"TableName": args.table}
    table = ask(client, "describe_table", _answers.TABLE, **named)["Table"]
    ttl = ask(client, "describe_time_to_live", _answers.TIME_TO_LIVE, **named)
    checks = [key_schema(table, args.key_attr, args.sort_key_attr)]
    checks.append(time_to_live(ttl.get("TimeToLiveDescription", {}), args.expiry_attr))
    backups = ask(client, "describe_continuous_backups", _answers.BACKUPS, **named)
    checks += recovery(backups, table)
    checks.append(_capacity_of(args, client, table))
    checks.append(global_table(table))
    checks += outbox_checks(args, table)
    checks += _role_checks(args, client, table["TableArn"])
    for found in checks:
        check = (
            found
            if found.fix is None
            else replace(found, fix=found.fix.replace("<table>", args.table))
        )
        if args.json:
            screen.json({k: v for k, v in asdict(check).items() if v is not None})
        else:
            screen.out(text(check, width=screen.width()))
    return 1 if any(check.status == FAIL for check in checks) else 0


def _capacity_of(args: argparse.Namespace, dynamodb: Any, table: Mapping[str, Any]) -> Check:
    """`capacity`, asking Application Auto Scaling only about a provisioned table."""
    if table.get("BillingModeSummary", {}).get("BillingMode") == "PAY_PER_REQUEST":
        return capacity(table, ())
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return capacity(table, _scalable_dimensions(args, dynamodb))
    except (BotoCoreError, ClientError) as exc:
        return Check(
            "capacity",
            WARN,
            f"provisioned; its auto scaling could not be read ({type(exc).__name__})",
            "allow application-autoscaling:DescribeScalableTargets, or check it in the console",
        )


def _scalable_dimensions(args: argparse.Namespace, dynamodb: Any) -> list[str]:
    scaling = other_client(args, dynamodb, "application-autoscaling")
    targets = ask(
        scaling,
        "describe_scalable_targets",
        _answers.SCALABLE_TARGETS,
        ServiceNamespace="dynamodb",
        ResourceIds=[f"table/{args.table}"],
    )["ScalableTargets"]
    return [target["ScalableDimension"] for target in targets]


def _role_of_function(args: argparse.Namespace, dynamodb: Any) -> str | None:
    if not args.function:
        return None
    lambda_client = other_client(args, dynamodb, "lambda")
    role: str = ask(
        lambda_client, "get_function_configuration", _answers.FUNCTION, FunctionName=args.function
    )["Role"]
    return role


def _role_statements(args: argparse.Namespace, dynamodb: Any, role: str) -> list[dict[str, Any]]:
    """Every statement of the role's inline and attached policies."""
    iam = other_client(args, dynamodb, "iam")
    name = role.rsplit("/", 1)[-1]
    listed = ask(iam, "list_role_policies", _answers.ROLE_POLICIES, RoleName=name)
    documents = [
        (
            "GetRolePolicy",
            ask(
                iam,
                "get_role_policy",
                _answers.ROLE_POLICY,
                RoleName=name,
                PolicyName=policy,
            )["PolicyDocument"],
        )
        for policy in listed["PolicyNames"]
    ]
    attached = ask(
        iam,
        "list_attached_role_policies",
        _answers.ATTACHED_POLICIES,
        RoleName=name,
    )
    for policy_arn in (found["PolicyArn"] for found in attached["AttachedPolicies"]):
        policy = ask(iam, "get_policy", _answers.POLICY, PolicyArn=policy_arn)["Policy"]
        version = ask(
            iam,
            "get_policy_version",
            _answers.POLICY_VERSION,
            PolicyArn=policy_arn,
            VersionId=policy["DefaultVersionId"],
        )
        documents.append(("GetPolicyVersion", version["PolicyVersion"]["Document"]))
    statements: list[dict[str, Any]] = []
    for api, answered in documents:
        statements += _statements(api, answered)
    return statements


def _statements(api: str, answered: str | Mapping[str, Any]) -> list[dict[str, Any]]:
    """Return a policy document's statements, checked as `permissions` reads them."""
    document: Any = answered
    if isinstance(answered, str):  # some endpoints answer the URL-encoded JSON text
        try:
            document = json.loads(unquote(answered))
        except ValueError:
            raise CliError(f"{api}'s answer is unusable: its policy document is not JSON") from None
    if not isinstance(document, Mapping):
        raise CliError(f"{api}'s answer is unusable: its policy document is not an object")
    found = document.get("Statement") or []
    statements = {"Statement": [found] if isinstance(found, Mapping) else found}
    _answers.check(api, statements, _answers.STATEMENTS)
    return list(statements["Statement"])
