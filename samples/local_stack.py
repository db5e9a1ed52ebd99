"""Stand up the sample's tables and bucket on a local endpoint from ``template.yaml`` itself.

The tables are created from the ``AWS::DynamoDB::Table`` resources of the template (key schema,
billing mode, stream, SSE, TTL), the buckets from its ``AWS::S3::Bucket`` resources (encryption,
public access block, ownership, lifecycle rules) when an S3 endpoint is given, the event buses,
their rules and the queues the rules target from the ``AWS::Events::*`` and ``AWS::SQS::Queue``
resources when EventBridge and SQS endpoints are given, and the functions'
environment is the template's ``Globals.Function.Environment`` with each ``!Ref`` resolved to the
local table or bucket name, or to a parameter's default: the local shapes and names cannot drift
from what ``sam deploy`` creates. Bucket policies are not applied: the local endpoint speaks plain
HTTP, which the template's deny-non-TLS policy would refuse (and moto does not enforce them).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import yaml

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

TEMPLATE = Path(__file__).resolve().parent.parent / "template.yaml"

#: Table properties that matter only in a deployed stack; a local table ignores them.
DEPLOY_ONLY_PROPERTIES = frozenset(
    {
        "PointInTimeRecoverySpecification",
        "DeletionProtectionEnabled",
        "ContributorInsightsSpecification",
        "Tags",
    }
)
#: Properties passed to ``CreateTable`` as they are written in the template.
_AS_IS = ("AttributeDefinitions", "KeySchema", "BillingMode", "ProvisionedThroughput", "TableClass")
#: Bucket properties that matter only in a deployed stack (a local bucket gets a local name).
BUCKET_DEPLOY_ONLY_PROPERTIES = frozenset({"BucketName", "Tags"})

logger = logging.getLogger(__name__)


class CloudFormationLoader(yaml.SafeLoader):
    """A YAML loader that reads CloudFormation's short tags (``!Ref``, ``!GetAtt``, ``!Sub``...).

    Each tag becomes its JSON long form: ``!Ref X`` -> ``{"Ref": "X"}``, ``!GetAtt A.B`` ->
    ``{"Fn::GetAtt": ["A", "B"]}``, ``!Sub s`` -> ``{"Fn::Sub": "s"}``.
    """


def _construct_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(cast(yaml.MappingNode, node), deep=True)
    if suffix == "Ref":
        return {"Ref": value}
    if suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {f"Fn::{suffix}": value}


CloudFormationLoader.add_multi_constructor("!", _construct_tag)


def load_template(path: Path = TEMPLATE) -> dict[str, Any]:
    """Parse a CloudFormation/SAM template, short tags included."""
    with path.open(encoding="utf-8") as stream:
        return cast(dict[str, Any], yaml.load(stream, Loader=CloudFormationLoader))


def table_definitions(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Return the ``Properties`` of every ``AWS::DynamoDB::Table``, by logical id."""
    return {
        logical_id: resource.get("Properties", {})
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::DynamoDB::Table"
    }


def create_table_request(table_name: str, properties: dict[str, Any]) -> dict[str, Any]:
    """Translate a template's table properties into ``CreateTable`` parameters.

    Raises:
        ValueError: A property this translation does not know (so nothing is silently dropped).
    """
    unknown = set(properties) - set(_AS_IS) - DEPLOY_ONLY_PROPERTIES
    unknown -= {"StreamSpecification", "SSESpecification", "TimeToLiveSpecification"}
    unknown -= {"GlobalSecondaryIndexes", "LocalSecondaryIndexes"}
    if unknown:
        raise ValueError(f"table property not supported locally: {', '.join(sorted(unknown))}")
    request: dict[str, Any] = {"TableName": table_name}
    request.update({name: properties[name] for name in _AS_IS if name in properties})
    for name in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
        if name in properties:
            request[name] = properties[name]
    stream = properties.get("StreamSpecification")
    if stream:
        request["StreamSpecification"] = {
            "StreamEnabled": True,
            "StreamViewType": stream["StreamViewType"],
        }
    sse = properties.get("SSESpecification")
    if sse:
        request["SSESpecification"] = {
            "Enabled": bool(sse.get("SSEEnabled")),
            **{key: sse[key] for key in ("SSEType", "KMSMasterKeyId") if key in sse},
        }
    return request


def bucket_definitions(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Return the ``Properties`` of every ``AWS::S3::Bucket``, by logical id."""
    return {
        logical_id: resource.get("Properties", {})
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::S3::Bucket"
    }


def bucket_configuration_requests(
    properties: dict[str, Any], parameters: dict[str, str]
) -> list[tuple[str, dict[str, Any]]]:
    """Translate a template's bucket properties into S3 calls: ``(method, arguments)`` pairs.

    Each pair is an ``s3`` client method and its arguments but ``Bucket``. ``!Ref``s to
    parameters (a lifecycle rule's ``ExpirationInDays``) take the parameter's default.

    Raises:
        ValueError: A property or lifecycle rule field this translation does not know.
    """
    unknown = set(properties) - BUCKET_DEPLOY_ONLY_PROPERTIES
    unknown -= {
        "BucketEncryption",
        "PublicAccessBlockConfiguration",
        "OwnershipControls",
        "LifecycleConfiguration",
    }
    if unknown:
        raise ValueError(f"bucket property not supported locally: {', '.join(sorted(unknown))}")
    requests: list[tuple[str, dict[str, Any]]] = []
    encryption = properties.get("BucketEncryption")
    if encryption:
        rules = [
            {
                "ApplyServerSideEncryptionByDefault": rule["ServerSideEncryptionByDefault"],
                **(
                    {"BucketKeyEnabled": rule["BucketKeyEnabled"]}
                    if "BucketKeyEnabled" in rule
                    else {}
                ),
            }
            for rule in encryption["ServerSideEncryptionConfiguration"]
        ]
        requests.append(
            ("put_bucket_encryption", {"ServerSideEncryptionConfiguration": {"Rules": rules}})
        )
    block = properties.get("PublicAccessBlockConfiguration")
    if block:
        requests.append(("put_public_access_block", {"PublicAccessBlockConfiguration": block}))
    ownership = properties.get("OwnershipControls")
    if ownership:
        requests.append(("put_bucket_ownership_controls", {"OwnershipControls": ownership}))
    lifecycle = properties.get("LifecycleConfiguration")
    if lifecycle:
        rules = [_lifecycle_rule(rule, parameters) for rule in lifecycle["Rules"]]
        requests.append(
            ("put_bucket_lifecycle_configuration", {"LifecycleConfiguration": {"Rules": rules}})
        )
    return requests


def _lifecycle_rule(rule: dict[str, Any], parameters: dict[str, str]) -> dict[str, Any]:
    """Translate one CloudFormation lifecycle rule into the S3 API's shape."""
    unknown = set(rule) - {
        "Id",
        "Status",
        "Prefix",
        "ExpirationInDays",
        "AbortIncompleteMultipartUpload",
    }
    if unknown:
        raise ValueError(
            f"lifecycle rule field not supported locally: {', '.join(sorted(unknown))}"
        )
    translated: dict[str, Any] = {
        "Status": rule["Status"],
        "Filter": {"Prefix": rule.get("Prefix", "")},
    }
    if "Id" in rule:
        translated["ID"] = rule["Id"]
    if "ExpirationInDays" in rule:
        days = resolve(rule["ExpirationInDays"], {}, parameters)
        translated["Expiration"] = {"Days": int(days)}
    abort = rule.get("AbortIncompleteMultipartUpload")
    if abort:
        days = resolve(abort["DaysAfterInitiation"], {}, parameters)
        translated["AbortIncompleteMultipartUpload"] = {"DaysAfterInitiation": int(days)}
    return translated


def parameter_defaults(template: dict[str, Any]) -> dict[str, str]:
    """Return each template parameter's default, as the string a ``!Ref`` to it yields."""
    return {
        name: str(parameter["Default"])
        for name, parameter in template.get("Parameters", {}).items()
        if "Default" in parameter
    }


def resolve(value: Any, names: dict[str, str], parameters: dict[str, str]) -> str:
    """Resolve a literal, or a ``!Ref`` to a local resource (its name) or a parameter (default).

    Raises:
        ValueError: Anything else (another intrinsic function, a ``!Ref`` to something unknown).
    """
    if isinstance(value, dict) and set(value) == {"Ref"}:
        target = value["Ref"]
        if target in names:
            return names[target]
        if target in parameters:
            return parameters[target]
    elif isinstance(value, str | int | float):
        return str(value)
    raise ValueError(f"cannot resolve {value!r} locally")


@dataclass(frozen=True, slots=True)
class LocalStack:
    """The tables and buckets created for a local run.

    Attributes:
        tables: Physical table name by logical id.
        buckets: Bucket name by logical id (empty when no S3 endpoint was given).
        environment: The functions' environment variables, resolved. A variable naming a bucket
            that was not created is left out.
    """

    tables: dict[str, str]
    buckets: dict[str, str]
    environment: dict[str, str]
    #: Event bus name by logical id; queue URL by logical id (the queues the rules target).
    buses: dict[str, str] = field(default_factory=dict)
    queues: dict[str, str] = field(default_factory=dict)


def create_stack(
    client: DynamoDBClient,
    *,
    prefix: str,
    s3: Any = None,
    events: Any = None,
    sqs: Any = None,
    template: dict[str, Any] | None = None,
) -> LocalStack:
    """Create (or reuse) every table of the template as ``{prefix}{LogicalId}``, and its buckets.

    An existing table of that name is reused as it is, so a run against DynamoDB Local or an
    account can be repeated. TTL is enabled as the template says (best effort: some local
    endpoints lack it, and the library checks expiry in code anyway). With an ``s3`` client,
    every bucket is created (or reused) as ``{prefix}{logicalid}`` (lower case) and configured
    as the template says; without one, no bucket exists and the variables naming one are unset.
    With ``events`` and ``sqs`` clients, every event bus, rule and queue a rule targets is created
    too (`create_event_routes`); without them, the variables naming a bus are unset.
    """
    template = template if template is not None else load_template()
    parameters = parameter_defaults(template)
    tables: dict[str, str] = {}
    for logical_id, properties in table_definitions(template).items():
        name = f"{prefix}{logical_id}"
        tables[logical_id] = name
        try:
            client.create_table(**create_table_request(name, properties))
        except client.exceptions.ResourceInUseException:
            logger.info("table %s exists; reusing it", name)
        client.get_waiter("table_exists").wait(
            TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
        )
        ttl = properties.get("TimeToLiveSpecification")
        if ttl and ttl.get("Enabled"):
            _enable_ttl(client, name, ttl["AttributeName"])
    buckets: dict[str, str] = {}
    definitions = bucket_definitions(template)
    if s3 is not None:
        for logical_id, properties in definitions.items():
            name = f"{prefix}{logical_id}".lower()
            buckets[logical_id] = name
            _create_bucket(s3, name)
            for method, arguments in bucket_configuration_requests(properties, parameters):
                getattr(s3, method)(Bucket=name, **arguments)
    elif definitions:
        logger.info("no S3 endpoint: buckets %s not created", ", ".join(definitions))
    # Named even when not created: a function emitting to a bus only stores its name.
    buses = {bus: f"{prefix}{bus}" for bus in resources_of(template, "AWS::Events::EventBus")}
    queues: dict[str, str] = {}
    if events is not None and sqs is not None:
        queues = create_event_routes(events, sqs, template, prefix=prefix)
    environment = function_environment(
        template, {**tables, **buckets, **buses}, omitted=frozenset(definitions) - set(buckets)
    )
    return LocalStack(
        tables=tables, buckets=buckets, environment=environment, buses=buses, queues=queues
    )


def resources_of(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    """Return the ``Properties`` of every resource of type ``kind``, by logical id."""
    return {
        logical_id: resource.get("Properties", {})
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == kind
    }


#: Queue properties that matter only in a deployed stack.
_QUEUE_DEPLOY_ONLY_PROPERTIES = frozenset({"SqsManagedSseEnabled", "Tags"})
_QUEUE_ATTRIBUTES = ("VisibilityTimeout", "MessageRetentionPeriod")


def create_event_routes(
    events: Any, sqs: Any, template: dict[str, Any], *, prefix: str
) -> dict[str, str]:
    """Create the template's event buses, their rules, and the SQS queues the rules target.

    Each bus, rule and queue is ``{prefix}{LogicalId}``. Each rule keeps its event pattern and
    targets (not their retry policy or dead-letter queue, which only a deployed bus applies),
    each queue its visibility timeout, retention and redrive policy (its dead-letter queue is
    created too). Existing ones are reused. Returns the queue URLs by logical id.

    Raises:
        ValueError: A rule refers to a bus that is not in the template, or targets something
            other than a queue of the template, or a queue has a property not translated here.
    """
    buses = {bus: f"{prefix}{bus}" for bus in resources_of(template, "AWS::Events::EventBus")}
    for name in buses.values():
        try:
            events.create_event_bus(Name=name)
        except events.exceptions.ResourceAlreadyExistsException:
            logger.info("event bus %s exists; reusing it", name)
    queues: dict[str, str] = {}
    arns: dict[str, str] = {}
    definitions = resources_of(template, "AWS::SQS::Queue")

    def queue_arn(logical_id: str) -> str:
        if logical_id not in arns:
            properties = definitions.get(logical_id)
            if properties is None:
                raise ValueError(f"{logical_id} is not a queue of the template")
            unknown = set(properties) - _QUEUE_DEPLOY_ONLY_PROPERTIES - set(_QUEUE_ATTRIBUTES)
            if unknown - {"RedrivePolicy"}:
                raise ValueError(f"queue property not supported locally: {sorted(unknown)}")
            attributes = {k: str(properties[k]) for k in _QUEUE_ATTRIBUTES if k in properties}
            redrive = properties.get("RedrivePolicy")
            if redrive:
                target = _get_att_arn(redrive["deadLetterTargetArn"])
                attributes["RedrivePolicy"] = json.dumps(
                    {
                        "deadLetterTargetArn": queue_arn(target),
                        "maxReceiveCount": int(redrive["maxReceiveCount"]),
                    }
                )
            url = sqs.create_queue(QueueName=f"{prefix}{logical_id}", Attributes=attributes)
            queues[logical_id] = url["QueueUrl"]
            arns[logical_id] = sqs.get_queue_attributes(
                QueueUrl=url["QueueUrl"], AttributeNames=["QueueArn"]
            )["Attributes"]["QueueArn"]
        return arns[logical_id]

    for logical_id, rule in resources_of(template, "AWS::Events::Rule").items():
        bus = rule.get("EventBusName", "default")
        if isinstance(bus, dict):
            if bus.get("Ref") not in buses:
                raise ValueError(f"rule {logical_id}: bus {bus!r} is not in the template")
            bus = buses[bus["Ref"]]
        name = f"{prefix}{logical_id}"
        events.put_rule(
            Name=name,
            EventBusName=bus,
            EventPattern=json.dumps(rule["EventPattern"]),
            State=rule.get("State", "ENABLED"),
        )
        targets = [
            {"Id": target["Id"], "Arn": queue_arn(_get_att_arn(target["Arn"]))}
            for target in rule.get("Targets", [])
        ]
        if targets:
            events.put_targets(Rule=name, EventBusName=bus, Targets=targets)
    return queues


def _get_att_arn(value: Any) -> str:
    """Return the logical id of a ``!GetAtt X.Arn``.

    Raises:
        ValueError: ``value`` is something else.
    """
    if (
        isinstance(value, dict)
        and list(value) == ["Fn::GetAtt"]
        and value["Fn::GetAtt"][1] == "Arn"
    ):
        return str(value["Fn::GetAtt"][0])
    raise ValueError(f"cannot resolve {value!r} locally: only !GetAtt <queue>.Arn")


def function_environment(
    template: dict[str, Any], names: dict[str, str], *, omitted: frozenset[str] = frozenset()
) -> dict[str, str]:
    """Resolve ``Globals.Function.Environment.Variables`` with local names and parameter defaults.

    A variable that refers to a resource in ``omitted`` (one not created locally) is left out.

    Raises:
        ValueError: A variable refers to something else than a local resource or a parameter.
    """
    variables = (
        template.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {})
    )
    parameters = parameter_defaults(template)
    environment: dict[str, str] = {}
    for variable, value in variables.items():
        if isinstance(value, dict) and value.get("Ref") in omitted:
            continue
        try:
            environment[variable] = resolve(value, names, parameters)
        except ValueError:
            raise ValueError(f"cannot resolve {variable}={value!r} locally") from None
    return environment


def _create_bucket(s3: Any, name: str) -> None:
    region = s3.meta.region_name
    location = {} if region in (None, "us-east-1") else {"LocationConstraint": region}
    try:
        if location:
            s3.create_bucket(Bucket=name, CreateBucketConfiguration=location)
        else:
            s3.create_bucket(Bucket=name)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        logger.info("bucket %s exists; reusing it", name)


def _enable_ttl(client: DynamoDBClient, table_name: str, attribute: str) -> None:
    try:
        client.update_time_to_live(
            TableName=table_name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": attribute},
        )
    except client.exceptions.ClientError as exc:
        message = exc.response.get("Error", {}).get("Message", "")
        if "already enabled" not in message.lower():
            logger.warning("could not enable TTL on %s.%s: %s", table_name, attribute, message)
