"""Invoke handlers locally the way Lambda would: events of the right shape, a context.

The event builders produce what API Gateway (HTTP API, payload 2.0), an SQS event source
mapping and a DynamoDB Stream event source mapping deliver. Stream records are not made up: the
testing kit's `TableStream` reads them from the endpoint's DynamoDB Streams API and adds what the
mapping adds.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from idempotent_lambda.testing import FakeLambdaContext

REGION = "us-east-1"
ACCOUNT = "123456789012"

Handler = Callable[[Any, Any], Any]


def _serialize_powertools_metric_flushes() -> None:
    """Make Powertools' EMF flush atomic while this emulator runs invocations in threads.

    Lambda runs one invocation at a time per execution environment; the demo sends concurrent
    duplicates from threads of one process instead. Powertools' ``Metrics`` are shared by the
    process, and its flush checks, serializes and clears the metric set in three steps: a
    third thread clearing in between makes the second raise "Must contain at least one metric".
    The functions' code stays as it is deployed; only this emulator takes the lock.
    """
    try:
        from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import (
            AmazonCloudWatchEMFProvider,
        )
    except ImportError:
        return
    flush = AmazonCloudWatchEMFProvider.flush_metrics
    if getattr(flush, "serialized_by_the_emulator", False):
        return
    lock = threading.Lock()

    @functools.wraps(flush)
    def serialized(self: Any, *args: Any, **kwargs: Any) -> None:
        with lock:
            flush(self, *args, **kwargs)

    serialized.serialized_by_the_emulator = True  # type: ignore[attr-defined]
    AmazonCloudWatchEMFProvider.flush_metrics = serialized  # type: ignore[method-assign]


_serialize_powertools_metric_flushes()


def load_handler(dotted: str) -> Handler:
    """Import ``package.module.function`` and return the function.

    Raises:
        ValueError: ``dotted`` does not name a callable in an importable module.
    """
    module_name, _, attribute = dotted.rpartition(".")
    if not module_name:
        raise ValueError(f"{dotted!r} is not module.function")
    handler = getattr(importlib.import_module(module_name), attribute, None)
    if not callable(handler):
        raise ValueError(f"{dotted!r} is not a callable")
    return handler  # type: ignore[no-any-return]


def invoke(handler: Handler, event: Any, *, function_name: str, timeout_s: int = 10) -> Any:
    """Call ``handler(event, context)`` with a fresh context of ``timeout_s`` remaining."""
    context = FakeLambdaContext(timeout_s * 1000, function_name=function_name)
    return handler(event, context)


def http_api_event(
    method: str,
    path: str,
    *,
    body: Any = None,
    headers: Mapping[str, str] | None = None,
    route_key: str | None = None,
    caller: str | None = None,
) -> dict[str, Any]:
    """Return an HTTP API (payload format 2.0) proxy event; header names are lower-cased.

    With ``caller``, the request passed the template's JWT authorizer as that user: the access
    token's claims (``sub`` = ``caller``) are in ``requestContext.authorizer.jwt``, where the
    authorizer puts them and `idempotent_http` reads the caller from.
    """
    text = body if isinstance(body, str) or body is None else json.dumps(body)
    now = time.time()
    authorizer = {} if caller is None else {"authorizer": jwt_authorizer(caller, now)}
    return {
        "version": "2.0",
        "routeKey": route_key or f"{method} {path}",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {
            "content-type": "application/json",
            "user-agent": "samples.demo",
            **{name.lower(): value for name, value in (headers or {}).items()},
        },
        "requestContext": {
            "accountId": ACCOUNT,
            "apiId": "local",
            "domainName": "localhost",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": "samples.demo",
            },
            "requestId": uuid.uuid4().hex,
            "routeKey": route_key or f"{method} {path}",
            "stage": "$default",
            "timeEpoch": int(now * 1000),
            **authorizer,
        },
        "body": text,
        "isBase64Encoded": False,
    }


def jwt_authorizer(sub: str, now: float) -> dict[str, Any]:
    """Return what an HTTP API JWT authorizer adds for a Cognito access token of ``sub``."""
    issued = int(now)
    claims = {
        "sub": sub,
        "iss": f"https://cognito-idp.{REGION}.amazonaws.com/{REGION}_local",
        "client_id": "local-orders-api-client",
        "token_use": "access",
        "scope": "aws.cognito.signin.user.admin",
        "auth_time": str(issued),
        "iat": str(issued),
        "exp": str(issued + 3600),
        "username": sub,
    }
    return {"jwt": {"claims": claims, "scopes": None}}


def sqs_message(body: Any, *, queue_arn: str, receive_count: int = 1) -> dict[str, Any]:
    """Return one SQS event record with a fresh message id, as the event source mapping sends."""
    text = body if isinstance(body, str) else json.dumps(body)
    now_ms = str(int(time.time() * 1000))
    return {
        "messageId": str(uuid.uuid4()),
        "receiptHandle": uuid.uuid4().hex,
        "body": text,
        "attributes": {
            "ApproximateReceiveCount": str(receive_count),
            "SentTimestamp": now_ms,
            "SenderId": "AIDAEXAMPLE",
            "ApproximateFirstReceiveTimestamp": now_ms,
        },
        "messageAttributes": {},
        "md5OfBody": hashlib.md5(text.encode()).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": REGION,
    }


def redelivered(record: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``record`` as SQS delivers it again: same message id, receive count + 1."""
    attributes = dict(record["attributes"])
    attributes["ApproximateReceiveCount"] = str(int(attributes["ApproximateReceiveCount"]) + 1)
    return {**record, "receiptHandle": uuid.uuid4().hex, "attributes": attributes}


def queue_arn(name: str) -> str:
    """Return the ARN a queue called ``name`` has in the local account."""
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"


def stream_event(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Wrap stream records in the batch event Lambda delivers."""
    return {"Records": records}


def sqs_event(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Wrap SQS records in the batch event Lambda delivers."""
    return {"Records": records}


def as_ttl_removal(record: Mapping[str, Any]) -> dict[str, Any]:
    """Mark a REMOVE record the way DynamoDB marks the deletions its TTL process makes."""
    return {
        **record,
        "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"},
    }


class QueueReader:
    """Receive a queue's messages as Lambda's SQS event source mapping does, and settle them.

    `receive` takes every visible message (they stay invisible for the queue's visibility
    timeout) in the Lambda event's record shape; `settle` deletes those the function did not
    report in ``batchItemFailures``, as the mapping does, and leaves the others to come back.
    """

    def __init__(self, client: Any, queue_url: str) -> None:
        """Read ``queue_url`` with an ``sqs`` client."""
        self._client = client
        self.queue_url = queue_url
        self.arn = client.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]

    def receive(self) -> list[dict[str, Any]]:
        """Return every message visible now, as SQS event records."""
        records: list[dict[str, Any]] = []
        while True:
            page = self._client.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=10,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
                WaitTimeSeconds=0,
            )
            messages = page.get("Messages", [])
            if not messages:
                return records
            records.extend(
                {
                    "messageId": message["MessageId"],
                    "receiptHandle": message["ReceiptHandle"],
                    "body": message["Body"],
                    "attributes": message.get("Attributes", {}),
                    "messageAttributes": message.get("MessageAttributes", {}),
                    "md5OfBody": message["MD5OfBody"],
                    "eventSource": "aws:sqs",
                    "eventSourceARN": self.arn,
                    "awsRegion": REGION,
                }
                for message in messages
            )

    def settle(self, records: list[dict[str, Any]], response: Mapping[str, Any]) -> None:
        """Delete the messages of ``records`` that ``response`` does not report failed."""
        failed = {item["itemIdentifier"] for item in response.get("batchItemFailures", [])}
        for record in records:
            if record["messageId"] not in failed:
                self._client.delete_message(
                    QueueUrl=self.queue_url, ReceiptHandle=record["receiptHandle"]
                )


def is_outbox_key(key: object) -> bool:
    """Tell whether an idempotency-table key is an outbox item's: ``<record key>#outbox#<id>``."""
    return isinstance(key, str) and "#outbox#" in f"#{key}"


def filter_records(records: list[dict[str, Any]], patterns: list[str]) -> list[dict[str, Any]]:
    """Keep the stream records an event source mapping with these filter ``patterns`` delivers.

    Lambda's filter criteria are EventBridge patterns over the record; they are evaluated here by
    moto's EventBridge pattern engine, as written in the template (OR-ed, as Lambda does).
    """
    from moto.events.models import EventPattern

    compiled = [EventPattern(pattern, json.loads(pattern)) for pattern in patterns]
    return [r for r in records if any(p.matches_event(r) for p in compiled)]


class PublisherKilled(BaseException):
    """The publisher's execution environment died (a timeout, an out-of-memory kill)."""


class KillAfterPutEvents:
    """Kill an invocation after its ``PutEvents`` succeeded and before its next DynamoDB write.

    Registered on a boto3 session before its clients are made; `arm` makes the next such write
    raise `PublisherKilled` instead of being sent: the events are on the bus, their outbox items
    are not marked published, as when Lambda stops a publisher between the two calls.
    """

    WRITES = frozenset(
        {"UpdateItem", "PutItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}
    )

    def __init__(self, session: Any) -> None:
        """Watch the clients ``session`` makes from now on."""
        self._armed = False
        self._put = False
        self.killed = 0
        session.events.register("after-call.events.PutEvents", self._after_put_events)
        session.events.register("before-call.dynamodb", self._before_write)

    def arm(self) -> None:
        """Kill the next invocation that writes to DynamoDB after a successful ``PutEvents``."""
        self._armed, self._put = True, False

    def _after_put_events(self, http_response: Any, parsed: Mapping[str, Any], **_: Any) -> None:
        if self._armed and http_response.status_code == 200 and not parsed.get("FailedEntryCount"):
            self._put = True

    def _before_write(self, model: Any, **_: Any) -> None:
        if self._armed and self._put and model.name in self.WRITES:
            self._armed = self._put = False
            self.killed += 1
            raise PublisherKilled("killed after PutEvents, before marking the events published")


class FailNextCommit:
    """Fail the next ``TransactWriteItems``: the body ran, its writes and events are not stored.

    Registered on a boto3 session before its clients are made; `arm` makes the next
    transaction fail with DynamoDB's ``InternalServerError`` instead of being sent, as a commit
    that DynamoDB could not complete. The invocation fails; its caller retries.
    """

    def __init__(self, session: Any) -> None:
        """Watch the clients ``session`` makes from now on."""
        self._armed = False
        session.events.register("before-call.dynamodb.TransactWriteItems", self._before)

    def arm(self) -> None:
        """Fail the next transaction."""
        self._armed = True

    def _before(self, **_: Any) -> None:
        if self._armed:
            self._armed = False
            from botocore.exceptions import ClientError

            error = {"Code": "InternalServerError", "Message": "injected by the demo"}
            raise ClientError({"Error": error}, "TransactWriteItems")
