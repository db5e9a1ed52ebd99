"""template.yaml, read as data: least-privilege IAM, tables, bucket, event source mappings.

The template is parsed with a loader that keeps CloudFormation's short tags (``!Ref``,
``!GetAtt``, ``!Sub``...) as their JSON long form, so references can be asserted exactly.
cfn-lint, ``sam validate --lint`` and ``sam build`` run in ``make template-check``.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import re
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import pytest
import yaml

from samples.local_stack import CloudFormationLoader, load_template

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"

#: What DynamoDBPersistenceLayer calls (see test_the_store_calls_only_the_granted_operations).
IDEMPOTENCY_ACTIONS = [
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:DeleteItem",
]
#: Client method -> the IAM action it needs. A TransactWriteItems is authorised per write, as the
#: action of each (the record's Put is a PutItem).
CLIENT_METHOD_ACTIONS = {
    "get_item": "dynamodb:GetItem",
    "put_item": "dynamodb:PutItem",
    "delete_item": "dynamodb:DeleteItem",
    "transact_write_items": "dynamodb:PutItem",
    "batch_get_item": "dynamodb:BatchGetItem",
    "batch_write_item": "dynamodb:BatchWriteItem",
}
APP = ROOT / "samples" / "app"
IDEMPOTENCY_TABLE_ARN = {"Fn::GetAtt": ["IdempotencyTable", "Arn"]}
#: The lifecycle rule's folder; each function offloads under ``idempotency/<key_prefix>/``.
LARGE_RESULT_PREFIX = "idempotency/"
#: Batch handlers also read all of a batch's keys at once, and write completions together.
BATCH_FUNCTIONS = {"ProcessPaymentFunction", "ProjectOrdersFunction", "ReserveStockFunction"}
BATCH_ACTIONS = ["dynamodb:BatchGetItem", "dynamodb:BatchWriteItem"]
#: The outbox's publisher keeps no idempotency record: it reads and marks outbox items
#: (tests/functional/test_template_outbox.py checks its grants).
PUBLISHER = "PublishEventsFunction"
#: It republishes what the stream did not bring: no record of its own either.
SWEEPER = "SweepOutboxFunction"
LARGE_RESULT_ACTIONS = ["s3:GetObject", "s3:PutObject"]
EXPIRY_PARAMETER = {"Ref": "IdempotencyExpiryDays"}
CURRENT_PYTHON_RUNTIMES = {"python3.12", "python3.13", "python3.14"}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    with TEMPLATE.open(encoding="utf-8") as stream:
        return cast(dict[str, Any], yaml.load(stream, Loader=CloudFormationLoader))


def resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {
        name: resource["Properties"]
        for name, resource in template["Resources"].items()
        if resource["Type"] == kind
    }


def statements(function: dict[str, Any]) -> list[dict[str, Any]]:
    """Every inline policy statement of a function (SAM policy templates are refused)."""
    found = []
    for policy in function.get("Policies", []):
        # only inline statements: no managed policies, no SAM policy templates
        assert isinstance(policy, dict), policy
        assert {"Statement"} == set(policy), policy
        found.extend(policy["Statement"])
    return found


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def mentions(value: Any, logical_id: str) -> bool:
    """Tell whether ``value`` (a Resource entry) refers to the resource ``logical_id``."""
    text = repr(value)
    return f"'{logical_id}'" in text or "${" + logical_id in text


def test_loader_reads_short_tags() -> None:
    """The tag-aware loader turns !Ref, !GetAtt and !Sub into their long forms."""
    document = "a: !Ref T\nb: !GetAtt T.Arn\nc: !Sub '${T.Arn}/x'\nd: !GetAtt [T, StreamArn]\n"
    assert {
        "a": {"Ref": "T"},
        "b": {"Fn::GetAtt": ["T", "Arn"]},
        "c": {"Fn::Sub": "${T.Arn}/x"},
        "d": {"Fn::GetAtt": ["T", "StreamArn"]},
    } == yaml.load(document, Loader=CloudFormationLoader)


def key_prefix_in(handler: str) -> str:
    """Return the ``KEY_PREFIX`` of ``app.<module>.handler``, checked to be what it passes.

    The module's adapter gets ``key_prefix=KEY_PREFIX`` and its store is
    ``idempotency_store(KEY_PREFIX)`` (which offloads under that prefix too).
    """
    module = handler.removeprefix("app.").removesuffix(".handler")
    tree = ast.parse((APP / f"{module}.py").read_text(encoding="utf-8"))
    (value,) = [
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [ast.unparse(target) for target in node.targets] == ["KEY_PREFIX"]
        and isinstance(node.value, ast.Constant)
    ]
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    passed = [k.value for c in calls for k in c.keywords if k.arg == "key_prefix"]
    assert ["KEY_PREFIX"] == [ast.unparse(v) for v in passed], module
    stores = [ast.unparse(c) for c in calls if ast.unparse(c.func) == "idempotency_store"]
    assert ["idempotency_store(KEY_PREFIX)"] == stores, module
    return str(value)


def record_functions(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The functions that keep idempotency records: all but the outbox's publisher and sweeper."""
    functions = resources(template, "AWS::Serverless::Function")
    return {
        name: function for name, function in functions.items() if name not in {PUBLISHER, SWEEPER}
    }


def test_every_function_has_exactly_the_store_actions_on_its_own_keys(
    template: dict[str, Any],
) -> None:
    """Idempotency table: GetItem, PutItem, DeleteItem (batch handlers also BatchGetItem and
    BatchWriteItem), on items of the function's key prefix (which covers the outbox items it
    emits)."""
    functions = record_functions(template)
    assert functions
    prefixes = set()
    for name, function in functions.items():
        on_table = [s for s in statements(function) if s.get("Resource") == IDEMPOTENCY_TABLE_ARN]
        assert 1 == len(on_table), name
        statement = on_table[0]
        assert "Allow" == statement["Effect"]
        expected = IDEMPOTENCY_ACTIONS + [*BATCH_ACTIONS] * (name in BATCH_FUNCTIONS)
        assert sorted(expected) == sorted(as_list(statement["Action"])), name
        assert IDEMPOTENCY_TABLE_ARN == statement["Resource"], name
        prefix = key_prefix_in(function["Handler"])
        prefixes.add(prefix)
        expected = {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{prefix}#*"]}}
        assert expected == statement["Condition"], name
        assert "NotAction" not in statement
    assert len(functions) == len(prefixes)  # no two functions share a key space


def test_the_store_calls_only_the_granted_operations() -> None:
    """Every DynamoDB client call of the store needs an action the template grants.

    Left out: the operator tools' modules (table creation, the CLI's scans and deletes), which
    run with an operator's credentials, never in a function; and the Redis client adapter.
    """
    # _outbox.py: the outbox's calls, checked per method in test_template_outbox.py.
    not_dynamodb_runtime = {"_operator.py", "_commands.py", "_outbox.py"}
    called: set[str] = set()
    for path in (ROOT / "idempotent_lambda" / "persistence").rglob("*.py"):
        if path.name in not_dynamodb_runtime:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "client"
            ):
                called.add(node.func.attr)
    # DescribeTable: only with sort_key_attr (the sample uses none), and a denial is tolerated.
    called.discard("describe_table")
    assert {"get_item", "put_item", "delete_item"} <= called
    assert called <= set(CLIENT_METHOD_ACTIONS), called - set(CLIENT_METHOD_ACTIONS)
    granted = {*IDEMPOTENCY_ACTIONS, *BATCH_ACTIONS}  # the last: batch functions only
    assert granted == {CLIENT_METHOD_ACTIONS[method] for method in called}


def test_no_statement_uses_wildcards(template: dict[str, Any]) -> None:
    """No action or resource is a wildcard; no NotAction / NotResource."""
    for name, function in resources(template, "AWS::Serverless::Function").items():
        for statement in statements(function):
            assert "Allow" == statement["Effect"]
            assert not {"NotAction", "NotResource"} & set(statement), name
            for action in as_list(statement["Action"]):
                assert "*" not in action, (name, action)
            for resource in as_list(statement["Resource"]):
                assert resource != "*", name
                assert not (isinstance(resource, str) and resource.endswith(":*")), name


def test_functions_do_not_get_aws_managed_event_source_policies(template: dict[str, Any]) -> None:
    """SQS and stream wiring are explicit mappings, so SAM attaches no managed policies on *."""
    for name, function in resources(template, "AWS::Serverless::Function").items():
        for event in function.get("Events", {}).values():
            assert event["Type"] == "HttpApi", name


def test_create_order_may_only_put_orders(template: dict[str, Any]) -> None:
    """The order is a Put of the transaction that completes the record: PutItem, nothing else."""
    function = resources(template, "AWS::Serverless::Function")["CreateOrderFunction"]
    on_orders = [s for s in statements(function) if mentions(s.get("Resource"), "OrdersTable")]
    assert [["dynamodb:PutItem"]] == [as_list(s["Action"]) for s in on_orders]
    assert {"Fn::GetAtt": ["OrdersTable", "Arn"]} == on_orders[0]["Resource"]


def test_idempotency_table_matches_the_store(template: dict[str, Any]) -> None:
    """Partition key ``id`` (S) only, TTL on ``expiration``, on-demand, encrypted.

    (The outbox's index and its attributes: test_template_outbox.py.)
    """
    table = resources(template, "AWS::DynamoDB::Table")["IdempotencyTable"]
    assert [{"AttributeName": "id", "KeyType": "HASH"}] == table["KeySchema"]
    assert {"AttributeName": "id", "AttributeType": "S"} in table["AttributeDefinitions"]
    assert {"AttributeName": "expiration", "Enabled": True} == table["TimeToLiveSpecification"]
    assert "PAY_PER_REQUEST" == table["BillingMode"]
    assert table["SSESpecification"]["SSEEnabled"] is True


def test_orders_table_streams_both_images(template: dict[str, Any]) -> None:
    """ProjectOrders needs the old and new image of every change."""
    table = resources(template, "AWS::DynamoDB::Table")["OrdersTable"]
    assert {"StreamViewType": "NEW_AND_OLD_IMAGES"} == table["StreamSpecification"]


def test_runtime_is_a_current_python(template: dict[str, Any]) -> None:
    """A non-deprecated Python runtime, set once in Globals."""
    assert template["Globals"]["Function"]["Runtime"] in CURRENT_PYTHON_RUNTIMES


def test_library_ships_as_a_layer_on_every_function(template: dict[str, Any]) -> None:
    """The IdempotencyLayer (idempotent-lambda, installed as a requirement) reaches every function.

    How it is built: tests/functional/test_sample_copy.py.
    """
    layers = template["Globals"]["Function"]["Layers"]
    assert {"Ref": "IdempotencyLayer"} in layers
    layer = template["Resources"]["IdempotencyLayer"]
    assert "makefile" == layer["Metadata"]["BuildMethod"]
    folder = ROOT / layer["Properties"]["ContentUri"]
    assert "build-IdempotencyLayer:" in (folder / "Makefile").read_text()
    assert "idempotent-lambda==" in (folder / "requirements.txt").read_text()


def test_dependencies_layer_targets_the_functions_runtime_and_architecture(
    template: dict[str, Any],
) -> None:
    """The pydantic wheels are fetched for the runtime and architecture the functions run on."""
    function_globals = template["Globals"]["Function"]
    layer = template["Resources"]["DependenciesLayer"]
    makefile = (ROOT / layer["Properties"]["ContentUri"] / "Makefile").read_text()
    version = re.search(r"^PYTHON_VERSION \?= (\S+)$", makefile, re.M)
    platform = re.search(r"^PLATFORM \?= (\S+)$", makefile, re.M)
    assert version
    assert platform
    assert f"python{version.group(1)}" == function_globals["Runtime"]
    architecture = {"arm64": "aarch64", "x86_64": "x86_64"}[function_globals["Architectures"][0]]
    assert platform.group(1).endswith(architecture)
    assert [function_globals["Architectures"][0]] == layer["Properties"]["CompatibleArchitectures"]


def test_table_names_reach_the_functions_through_the_environment(
    template: dict[str, Any],
) -> None:
    """Each table the app uses is passed by reference, never hard-coded."""
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    assert {"Ref": "IdempotencyTable"} == variables["IDEMPOTENCY_TABLE"]
    assert {"Ref": "OrdersTable"} == variables["ORDERS_TABLE"]
    assert {"Ref": "CustomerTotalsTable"} == variables["CUSTOMER_TOTALS_TABLE"]


def test_queue_has_a_dead_letter_queue_and_a_safe_visibility_timeout(
    template: dict[str, Any],
) -> None:
    """Poison payments end in the DLQ; a batch in flight is not redelivered meanwhile."""
    queue = resources(template, "AWS::SQS::Queue")["PaymentsQueue"]
    redrive = queue["RedrivePolicy"]
    assert {"Fn::GetAtt": ["PaymentsDeadLetterQueue", "Arn"]} == redrive["deadLetterTargetArn"]
    assert 1 <= redrive["maxReceiveCount"] <= 10
    timeout = template["Globals"]["Function"]["Timeout"]
    mapping = resources(template, "AWS::Lambda::EventSourceMapping")["PaymentsEventSourceMapping"]
    assert queue["VisibilityTimeout"] > 6 * timeout + mapping["MaximumBatchingWindowInSeconds"]


def test_event_source_mappings_report_partial_batch_failures(template: dict[str, Any]) -> None:
    """Both mappings let the adapters report single records; the stream one is bounded."""
    mappings = resources(template, "AWS::Lambda::EventSourceMapping")
    payments = mappings["PaymentsEventSourceMapping"]
    assert {"Fn::GetAtt": ["PaymentsQueue", "Arn"]} == payments["EventSourceArn"]
    assert ["ReportBatchItemFailures"] == payments["FunctionResponseTypes"]

    stream = mappings["OrdersStreamEventSourceMapping"]
    assert {"Fn::GetAtt": ["OrdersTable", "StreamArn"]} == stream["EventSourceArn"]
    assert ["ReportBatchItemFailures"] == stream["FunctionResponseTypes"]
    assert stream["BisectBatchOnFunctionError"] is True
    assert 0 <= stream["MaximumRetryAttempts"] <= 10
    assert 60 <= stream["MaximumRecordAgeInSeconds"] <= 24 * 3600
    assert "Destination" in stream["DestinationConfig"]["OnFailure"]


def test_outputs_name_the_api_and_tables(template: dict[str, Any]) -> None:
    """Deploying prints where to send requests and which tables were made."""
    assert {"ApiUrl", "IdempotencyTableName", "OrdersTableName"} <= set(template["Outputs"])


def test_outputs_name_the_large_results_bucket(template: dict[str, Any]) -> None:
    """Deploying prints the bucket, for the CLI's ``aws s3 cp`` of an offloaded result."""
    assert {"Ref": "LargeResultsBucket"} == template["Outputs"]["LargeResultsBucketName"]["Value"]


# ----------------------------------------------------------------------------- large results


def test_every_function_offloads_under_its_own_prefix_of_the_lifecycle_folder() -> None:
    """The app's stores offload under ``idempotency/<key_prefix>/``: the rule's folder, per key."""
    aws = _sample_aws_module()
    assert LARGE_RESULT_PREFIX == aws.LARGE_RESULTS_ROOT
    assert "idempotency/orders.create_order/" == aws.large_result_prefix("orders.create_order")


def test_large_results_bucket_is_encrypted_private_and_owner_enforced(
    template: dict[str, Any],
) -> None:
    """SSE by default, every public access block on, ACLs disabled (bucket owner enforced)."""
    bucket = resources(template, "AWS::S3::Bucket")["LargeResultsBucket"]
    (rule,) = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in {"AES256", "aws:kms"}
    assert {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    } == bucket["PublicAccessBlockConfiguration"]
    assert [{"ObjectOwnership": "BucketOwnerEnforced"}] == bucket["OwnershipControls"]["Rules"]
    assert "AccessControl" not in bucket
    assert "VersioningConfiguration" not in bucket  # expired objects would linger as versions


def test_large_results_bucket_denies_requests_without_tls(template: dict[str, Any]) -> None:
    """The bucket policy denies every S3 action on the bucket and its objects over plain HTTP."""
    (policy,) = resources(template, "AWS::S3::BucketPolicy").values()
    assert {"Ref": "LargeResultsBucket"} == policy["Bucket"]
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert ("Deny", "*", "s3:*") == (
        statement["Effect"],
        statement["Principal"],
        statement["Action"],
    )
    assert [
        {"Fn::GetAtt": ["LargeResultsBucket", "Arn"]},
        {"Fn::Sub": "${LargeResultsBucket.Arn}/*"},
    ] == statement["Resource"]
    assert {"Bool": {"aws:SecureTransport": "false"}} == statement["Condition"]


def test_lifecycle_expires_objects_with_their_records(template: dict[str, Any]) -> None:
    """One rule on the store's prefix: objects expire ceil(record expiry / 1 day) days after.

    Both lifetimes come from the IdempotencyExpiryDays parameter: the lifecycle rule's
    ``ExpirationInDays`` is it, and the functions get it as IDEMPOTENCY_EXPIRY_DAYS and live
    that many days (`test_the_app_derives_the_record_expiry_from_the_template`).
    """
    bucket = resources(template, "AWS::S3::Bucket")["LargeResultsBucket"]
    (rule,) = bucket["LifecycleConfiguration"]["Rules"]
    assert ("Enabled", LARGE_RESULT_PREFIX) == (rule["Status"], rule["Prefix"])
    assert EXPIRY_PARAMETER == rule["ExpirationInDays"]
    assert 1 <= rule["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"] <= 7
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    assert EXPIRY_PARAMETER == variables["IDEMPOTENCY_EXPIRY_DAYS"]

    parameter = template["Parameters"]["IdempotencyExpiryDays"]
    assert "Number" == parameter["Type"]
    assert parameter["MinValue"] >= 1
    days = parameter["Default"]
    assert days == math.ceil(days * 86400 / 86400)  # whole days: S3 counts days
    # every record expiry the parameter allows outlives the stream mapping's record age
    mapping = resources(template, "AWS::Lambda::EventSourceMapping")
    max_age = mapping["OrdersStreamEventSourceMapping"]["MaximumRecordAgeInSeconds"]
    assert parameter["MinValue"] * 86400 > max_age


def _sample_aws_module() -> Any:
    spec = importlib.util.spec_from_file_location("_sample_app_aws", ROOT / "samples/app/aws.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_app_derives_the_record_expiry_from_the_template(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``expires_after_seconds`` is IDEMPOTENCY_EXPIRY_DAYS x 86400 in every handler."""
    aws = _sample_aws_module()
    for days in ("1", "3"):
        monkeypatch.setenv("IDEMPOTENCY_EXPIRY_DAYS", days)
        seconds = aws.record_expiry_seconds()
        assert int(days) * 86400 == seconds
        assert int(days) == math.ceil(seconds / 86400)  # the lifecycle rule's days
    for wrong in ("0", "1.5", "day", ""):
        monkeypatch.setenv("IDEMPOTENCY_EXPIRY_DAYS", wrong)
        with pytest.raises(RuntimeError, match="IDEMPOTENCY_EXPIRY_DAYS"):
            aws.record_expiry_seconds()

    configs = 0
    for path in sorted((ROOT / "samples" / "app").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            # idempotency_config(...) (observability.py) passes its options to IdempotencyConfig
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "idempotency_config":
                configs += 1
                (expiry,) = [k.value for k in node.keywords if k.arg == "expires_after_seconds"]
                assert "record_expiry_seconds()" == ast.unparse(expiry), path.name
    assert len(record_functions(load_template())) == configs


def test_functions_may_only_put_and_get_large_results_under_their_own_prefix(
    template: dict[str, Any],
) -> None:
    """Each function: s3:PutObject and s3:GetObject on its own objects only.

    ``<bucket>/idempotency/<key_prefix>/<key_prefix>%23*``: the folder where its store offloads,
    and the objects named after its keys (``#`` quoted), so no function can read or overwrite
    another's results, even one whose prefix nests in the folder. No ListBucket, DeleteObject or
    bucket-level action, no other S3 statement, no condition.
    """
    aws = _sample_aws_module()
    functions = record_functions(template)
    assert functions
    for name in (PUBLISHER, SWEEPER):
        outbox = resources(template, "AWS::Serverless::Function")[name]
        assert not [s for s in statements(outbox) if mentions(s["Resource"], "LargeResultsBucket")]
    granted = set()
    for name, function in functions.items():
        key_prefix = key_prefix_in(function["Handler"])
        prefix = aws.large_result_prefix(key_prefix)
        own = quote(key_prefix + "#", safe="")
        objects = {"Fn::Sub": "${LargeResultsBucket.Arn}/" + prefix + own + "*"}
        on_s3 = [
            s
            for s in statements(function)
            if mentions(s.get("Resource"), "LargeResultsBucket")
            or any(str(action).startswith("s3:") for action in as_list(s["Action"]))
        ]
        assert 1 == len(on_s3), name
        statement = on_s3[0]
        assert "Allow" == statement["Effect"]
        assert LARGE_RESULT_ACTIONS == sorted(as_list(statement["Action"])), name
        assert objects == statement["Resource"], name
        assert not {"Condition", "NotAction", "NotResource"} & set(statement), name
        granted.add(prefix)
    assert len(functions) == len(granted)


def test_large_results_bucket_reaches_the_functions_through_the_environment(
    template: dict[str, Any],
) -> None:
    """LARGE_RESULTS_BUCKET is the bucket by reference; the app passes it to its store."""
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    assert {"Ref": "LargeResultsBucket"} == variables["LARGE_RESULTS_BUCKET"]
    source = (ROOT / "samples" / "app" / "aws.py").read_text(encoding="utf-8")
    assert 'bucket = os.environ.get("LARGE_RESULTS_BUCKET") or None' in source
    assert "large_result_bucket=bucket," in source


def alarms_on(template: dict[str, Any], namespace: Any, metric: str) -> list[dict[str, Any]]:
    return [
        alarm
        for alarm in resources(template, "AWS::CloudWatch::Alarm").values()
        if alarm["Namespace"] == namespace and alarm["MetricName"] == metric
    ]


def dimension(alarm: dict[str, Any]) -> dict[str, Any]:
    return {d["Name"]: d["Value"] for d in alarm["Dimensions"]}


def test_every_alarm_notifies_the_alarm_topic(template: dict[str, Any]) -> None:
    """An alarm nobody hears is no alarm: each one sends to AlarmTopic, which is an output."""
    alarms = resources(template, "AWS::CloudWatch::Alarm")
    assert len(alarms) >= 11
    # a sweeper that does not run sends no data: that silence is what its alarm is about
    silence = {"SweepOutboxNotRunningAlarm"}
    for name, alarm in alarms.items():
        assert [{"Ref": "AlarmTopic"}] == alarm["AlarmActions"], name
        expected = "breaching" if name in silence else "notBreaching"
        assert expected == alarm["TreatMissingData"], name
    assert {"Ref": "AlarmTopic"} == template["Outputs"]["AlarmTopicArn"]["Value"]


def test_queues_that_hold_given_up_work_are_alarmed(template: dict[str, Any]) -> None:
    """The payments DLQ and the stream's on-failure queue alarm on their first message."""
    depth = alarms_on(template, "AWS/SQS", "ApproximateNumberOfMessagesVisible")
    queues = {dimension(alarm)["QueueName"]["Fn::GetAtt"][0] for alarm in depth}
    assert {
        "PaymentsDeadLetterQueue",
        "ProjectOrdersFailureQueue",
        "OrderEventsDeadLetterQueue",
        "OutboxPublishFailureQueue",
    } == queues
    assert all(alarm["Threshold"] == 0 for alarm in depth)
    assert all(alarm["ComparisonOperator"] == "GreaterThanThreshold" for alarm in depth)


def test_functions_have_error_throttle_and_iterator_age_alarms(template: dict[str, Any]) -> None:
    """Errors and throttles of every function; the stream consumers' iterator age."""
    functions = set(resources(template, "AWS::Serverless::Function"))
    for metric in ("Errors", "Throttles"):
        watched = {
            dimension(a)["FunctionName"]["Ref"] for a in alarms_on(template, "AWS/Lambda", metric)
        }
        assert functions == watched, metric
    ages = alarms_on(template, "AWS/Lambda", "IteratorAge")
    streamed = {
        mapping["FunctionName"]["Ref"].removesuffix(".Alias")
        for mapping in resources(template, "AWS::Lambda::EventSourceMapping").values()
        if "StreamArn" in repr(mapping["EventSourceArn"])
    }
    assert {"ProjectOrdersFunction", PUBLISHER} == streamed
    assert streamed == {dimension(age)["FunctionName"]["Ref"] for age in ages}


def test_library_metrics_are_alarmed_where_the_functions_emit_them(
    template: dict[str, Any],
) -> None:
    """LeaseLost and CompleteFailed alarms watch the namespace and service the app's Metrics use."""
    from idempotent_lambda import Decision, Outcome
    from idempotent_lambda.metrics import decision_metrics

    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    namespace = variables["POWERTOOLS_METRICS_NAMESPACE"]
    assert {"Ref": "MetricsNamespace"} == namespace
    for outcome in (Outcome.LEASE_LOST, Outcome.COMPLETE_FAILED):
        metric = decision_metrics(Decision(outcome=outcome, function="f"))[0].name
        (alarm,) = alarms_on(template, namespace, metric)
        assert {"service": variables["POWERTOOLS_SERVICE_NAME"]} == dimension(alarm)
        assert "Sum" == alarm["Statistic"]
        assert 1 == alarm["Threshold"]
        assert "GreaterThanOrEqualToThreshold" == alarm["ComparisonOperator"]


def test_the_functions_emit_through_powertools() -> None:
    """The app's decisions go to a Powertools Logger and Metrics, which the layer ships."""
    source = (APP / "observability.py").read_text(encoding="utf-8")
    assert "from aws_lambda_powertools import Logger, Metrics" in source
    assert "PowertoolsMetricsHook(metrics)" in source
    assert "logger=logger" in source
    for module in ("create_order", "process_payment", "project_orders", "reserve_stock"):
        text = (APP / f"{module}.py").read_text(encoding="utf-8")
        assert "@metrics.log_metrics" in text, module
        assert "config=idempotency_config(" in text, module
    requirements = (ROOT / "samples/layers/dependencies/requirements.txt").read_text()
    assert re.search(r"^aws-lambda-powertools==\S+", requirements, re.MULTILINE)


def test_functions_are_traced_and_reserve_concurrency(template: dict[str, Any]) -> None:
    """X-Ray on every function; reserved concurrency never below the SQS mapping's maximum."""
    assert "Active" == template["Globals"]["Function"]["Tracing"]
    functions = resources(template, "AWS::Serverless::Function")
    for name, function in functions.items():
        assert function["ReservedConcurrentExecutions"] >= 1, name
    mapping = resources(template, "AWS::Lambda::EventSourceMapping")["PaymentsEventSourceMapping"]
    reserved = functions["ProcessPaymentFunction"]["ReservedConcurrentExecutions"]
    assert reserved >= mapping["ScalingConfig"]["MaximumConcurrency"]


def test_stateful_tables_are_retained_and_protected(template: dict[str, Any]) -> None:
    """Deleting the stack or replacing a table never deletes records or orders."""
    for name, resource in template["Resources"].items():
        if resource["Type"] == "AWS::DynamoDB::Table":
            assert "Retain" == resource["DeletionPolicy"], name
            assert "Retain" == resource["UpdateReplacePolicy"], name
            assert resource["Properties"]["DeletionProtectionEnabled"] is True, name


def matches(pattern: Any, record: Any) -> bool:
    """Evaluate the subset of Lambda's filter syntax the template uses on ``record``."""
    for field_name, wanted in pattern.items():
        if isinstance(wanted, dict):
            if not matches(wanted, record.get(field_name, {}) if isinstance(record, dict) else {}):
                return False
            continue
        present = isinstance(record, dict) and field_name in record
        value = record.get(field_name) if present else None
        ok = False
        for rule in wanted:
            if isinstance(rule, dict) and "exists" in rule:
                ok |= rule["exists"] == present
            elif isinstance(rule, dict) and "anything-but" in rule:
                ok |= present and value not in rule["anything-but"]
            else:
                ok |= present and value == rule
        if not ok:
            return False
    return True


def test_stream_filter_drops_only_ttl_removals(template: dict[str, Any]) -> None:
    """INSERT, MODIFY and user REMOVEs reach ProjectOrders; the TTL service's REMOVEs do not."""
    import json

    mapping = resources(template, "AWS::Lambda::EventSourceMapping")[
        "OrdersStreamEventSourceMapping"
    ]
    patterns = [json.loads(f["Pattern"]) for f in mapping["FilterCriteria"]["Filters"]]
    ttl = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
    cases = [
        ({"eventName": "INSERT"}, True),
        ({"eventName": "MODIFY"}, True),
        ({"eventName": "REMOVE"}, True),
        ({"eventName": "REMOVE", "userIdentity": {"principalId": "someone"}}, True),
        ({"eventName": "REMOVE", "userIdentity": ttl}, False),
    ]
    for record, delivered in cases:
        assert delivered == any(matches(p, record) for p in patterns), record


# ------------------------------------------------------------------------------------ callers


def test_the_orders_api_requires_an_access_token_of_the_stack_user_pool(
    template: dict[str, Any],
) -> None:
    """Every route of OrdersApi has a JWT authorizer on OrdersUserPool's OrdersApiClient.

    The claims it passes (``requestContext.authorizer.jwt.claims``) carry the ``sub`` that
    idempotent_http scopes keys by, so two users never share a key.
    """
    api = resources(template, "AWS::Serverless::HttpApi")["OrdersApi"]
    auth = api["Auth"]
    (name,) = auth["Authorizers"]
    assert name == auth["DefaultAuthorizer"]
    authorizer = auth["Authorizers"][name]
    assert "$request.header.Authorization" == authorizer["IdentitySource"]
    assert {
        "issuer": {"Fn::Sub": "https://cognito-idp.${AWS::Region}.amazonaws.com/${OrdersUserPool}"},
        "audience": [{"Ref": "OrdersApiClient"}],
    } == authorizer["JwtConfiguration"]
    client = resources(template, "AWS::Cognito::UserPoolClient")["OrdersApiClient"]
    assert {"Ref": "OrdersUserPool"} == client["UserPoolId"]
    for function in resources(template, "AWS::Serverless::Function").values():
        for event in function.get("Events", {}).values():
            assert {"Ref": "OrdersApi"} == event["Properties"]["ApiId"]
            assert "Auth" not in event["Properties"]  # no route opts out of the default


def test_the_sample_reads_the_caller_where_the_authorizer_puts_it() -> None:
    """CreateOrder's order ids and the adapter's scope both come from the JWT's ``sub``."""
    from idempotent_lambda.adapters._http_identity import platform_caller

    event = {"requestContext": {"authorizer": {"jwt": {"claims": {"sub": "u-1"}, "scopes": None}}}}
    assert ("jwt", "u-1") == platform_caller(event)
    source = (APP / "create_order.py").read_text(encoding="utf-8")
    assert 'get("authorizer", {}).get("jwt", {}).get("claims", {})' in source


def test_the_user_pool_is_retained_and_admin_managed(template: dict[str, Any]) -> None:
    """Users are state: kept with the stack gone; nobody signs up by themselves."""
    pool = template["Resources"]["OrdersUserPool"]
    assert ("Retain", "Retain") == (pool["DeletionPolicy"], pool["UpdateReplacePolicy"])
    assert "ACTIVE" == pool["Properties"]["DeletionProtection"]
    assert pool["Properties"]["AdminCreateUserConfig"]["AllowAdminCreateUserOnly"] is True
    client = resources(template, "AWS::Cognito::UserPoolClient")["OrdersApiClient"]
    assert client["GenerateSecret"] is False
    assert "ALLOW_USER_PASSWORD_AUTH" not in client["ExplicitAuthFlows"]


def test_every_function_deploys_as_a_canary_behind_an_alias(template: dict[str, Any]) -> None:
    """A deploy shifts 10 % of traffic first and rolls back on the function's alarms."""
    function_globals = template["Globals"]["Function"]
    assert "live" == function_globals["AutoPublishAlias"]
    assert "Canary10Percent5Minutes" == function_globals["DeploymentPreference"]["Type"]
    alarms = resources(template, "AWS::CloudWatch::Alarm")
    for name, function in resources(template, "AWS::Serverless::Function").items():
        watched = [alarm["Ref"] for alarm in function["DeploymentPreference"]["Alarms"]]
        assert f"{name.removesuffix('Function')}ErrorsAlarm" in watched, name
        assert {"LeaseLostAlarm", "CompleteFailedAlarm"} <= set(watched), name
        assert set(watched) <= set(alarms), name
    for name, mapping in resources(template, "AWS::Lambda::EventSourceMapping").items():
        assert mapping["FunctionName"]["Ref"].endswith("Function.Alias"), name
