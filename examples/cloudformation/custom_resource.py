import json
import urllib.request

from idempotent_lambda import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    event_keys,
    idempotent_function,
)

store = DynamoDBPersistenceLayer("IdempotencyTable")
config = IdempotencyConfig(
    event_key_jmespath=event_keys.CLOUDFORMATION_CUSTOM_RESOURCE,  # stack + request + resource
    raise_on_no_idempotency_key=True,
)


def create_subscription(properties: dict) -> str:
    """Stand-in for the resource's work; returns the new subscription's id."""
    return f"sub-{properties['Plan']}"


def delete_subscription(subscription_id: str) -> None:
    """Stand-in for removing the subscription."""


@idempotent_function(
    data_keyword_argument="request",
    persistence_store=store,
    config=config,
)
def answer(request: dict) -> dict:
    """Do what the request asks, once per request; return the answer CloudFormation reads."""
    physical_id = request.get("PhysicalResourceId", request["LogicalResourceId"])
    reason = None
    try:
        if request["RequestType"] == "Delete":
            delete_subscription(physical_id)
        else:  # Create, Update: a new id makes CloudFormation delete the old one afterwards
            physical_id = create_subscription(request["ResourceProperties"])
    except Exception as exc:  # the stack waits for an answer, and FAILED is one
        reason = f"{type(exc).__name__}: {exc}"
    response = {
        "Status": "FAILED" if reason else "SUCCESS",
        "PhysicalResourceId": physical_id,
        "StackId": request["StackId"],
        "RequestId": request["RequestId"],
        "LogicalResourceId": request["LogicalResourceId"],
    }
    if reason:
        response["Reason"] = reason
    return response


def handler(event: dict, context) -> None:
    config.register_lambda_context(context)  # leases end when this invocation would time out
    response = answer(request=event)  # a repeated request gets the stored answer
    # Every delivery sends the answer: CloudFormation may have missed the last one. A failed
    # PUT fails the invocation after the answer is stored; Lambda retries the event, and the
    # retry sends the stored answer again without running the body.
    put = urllib.request.Request(
        event["ResponseURL"],
        data=json.dumps(response).encode(),
        method="PUT",
        headers={"Content-Type": ""},  # the pre-signed URL is signed without one
    )
    with urllib.request.urlopen(put, timeout=30) as reply:
        reply.read()
