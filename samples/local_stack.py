"""Stand up the sample's tables on a local endpoint from ``template.yaml`` itself.

The tables are created from the ``AWS::DynamoDB::Table`` resources of the template (key schema,
billing mode, stream, SSE, TTL), and the functions' environment is the template's
``Globals.Function.Environment`` with each ``!Ref`` resolved to the local table name: the local
shapes and names cannot drift from what ``sam deploy`` creates.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class LocalTables:
    """The tables created for a local run.

    Attributes:
        names: Physical table name by logical id.
        environment: The functions' environment variables, resolved.
    """

    names: dict[str, str]
    environment: dict[str, str]


def create_tables(
    client: DynamoDBClient, *, prefix: str, template: dict[str, Any] | None = None
) -> LocalTables:
    """Create (or reuse) every table of the template as ``{prefix}{LogicalId}``.

    An existing table of that name is reused as it is, so a run against DynamoDB Local or an
    account can be repeated. TTL is enabled as the template says (best effort: some local
    endpoints lack it, and the library checks expiry in code anyway).
    """
    template = template if template is not None else load_template()
    names: dict[str, str] = {}
    for logical_id, properties in table_definitions(template).items():
        name = f"{prefix}{logical_id}"
        names[logical_id] = name
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
    return LocalTables(names=names, environment=function_environment(template, names))


def function_environment(template: dict[str, Any], names: dict[str, str]) -> dict[str, str]:
    """Resolve ``Globals.Function.Environment.Variables`` with local table names.

    Raises:
        ValueError: A variable refers to something other than a table.
    """
    variables = (
        template.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {})
    )
    environment: dict[str, str] = {}
    for variable, value in variables.items():
        if isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in names:
            environment[variable] = names[value["Ref"]]
        elif isinstance(value, str | int | float):
            environment[variable] = str(value)
        else:
            raise ValueError(f"cannot resolve {variable}={value!r} locally")
    return environment


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
