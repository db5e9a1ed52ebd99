"""The SQS adapter against a real DynamoDB-compatible server: conditional writes, round trips."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig
from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler
from idempotent_lambda.testing import FakeLambdaContext
from tests.integration._requests import assert_requests

if TYPE_CHECKING:
    pass

STANDARD_ARN = "arn:aws:sqs:us-east-1:123456789012:orders"
FIFO_ARN = "arn:aws:sqs:us-east-1:123456789012:orders.fifo"
BUSINESS_KEY = IdempotencyConfig(event_key_jmespath="powertools_json(body).order_id")
CONTEXT_MS = 600_000  # on the wall clock: a whole batch fits in it however loaded the machine


def message(
    message_id: str, body: Any, *, arn: str = STANDARD_ARN, group: str | None = None
) -> dict[str, Any]:
    """Return an SQS record in the shape Lambda delivers."""
    attributes = {"ApproximateReceiveCount": "1", "SentTimestamp": "1523232000000"}
    if group is not None:
        attributes |= {"MessageGroupId": group, "MessageDeduplicationId": message_id}
    return {
        "messageId": message_id,
        "receiptHandle": f"handle-{message_id}",
        "body": json.dumps(body),
        "attributes": attributes,
        "messageAttributes": {},
        "md5OfBody": "0",
        "eventSource": "aws:sqs",
        "eventSourceARN": arn,
        "awsRegion": "us-east-1",
    }


def failed(response: Mapping[str, Any]) -> list[str]:
    """Return the reported identifiers, in order."""
    return [failure["itemIdentifier"] for failure in response["batchItemFailures"]]


class Executions:
    """A record handler that counts executions per order and fails the orders it is told to."""

    def __init__(self, fail: set[int] | None = None) -> None:
        self.fail = fail or set()
        self.per_order: Counter[int] = Counter()
        self.order: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, record: SQSRecord, context: Any) -> dict[str, Any]:
        order_id = record.json_body["order_id"]
        with self._lock:
            self.per_order[order_id] += 1
            self.order.append(record.message_id)
        if order_id in self.fail:
            raise RuntimeError("payment service refused")
        return {"order_id": order_id, "charged": True}


def test_redelivery_runs_only_the_records_that_failed(
    dynamodb_store: DynamoDBPersistenceLayer, requests: Counter[str]
) -> None:
    """First delivery: a claim per record, and the completions written together; redelivery: 1
    per replay, a claim and a completion per rerun."""
    executions = Executions(fail={3, 7})
    handler = idempotent_sqs_handler(persistence_store=dynamodb_store)(executions)
    event = {"Records": [message(f"m-{n}", {"order_id": n}) for n in range(10)]}
    assert ["m-3", "m-7"] == failed(handler(event, FakeLambdaContext(CONTEXT_MS)))
    assert_requests(requests, completions=8, PutItem=10, DeleteItem=2)

    requests.clear()
    executions.fail.clear()
    assert [] == failed(handler(event, FakeLambdaContext(CONTEXT_MS)))
    assert_requests(requests, completions=2, PutItem=10)
    assert {n: (2 if n in (3, 7) else 1) for n in range(10)} == dict(executions.per_order)


def test_fifo_stops_at_the_first_failure_and_resumes_there(
    dynamodb_store: DynamoDBPersistenceLayer,
) -> None:
    """FIFO: the failed record and all later ones are reported unprocessed, then resume."""
    executions = Executions(fail={2})
    handler = idempotent_sqs_handler(persistence_store=dynamodb_store)(executions)
    event = {
        "Records": [message(f"m-{n}", {"order_id": n}, arn=FIFO_ARN, group="g") for n in range(5)]
    }
    assert ["m-2", "m-3", "m-4"] == failed(handler(event, FakeLambdaContext(CONTEXT_MS)))
    assert ["m-0", "m-1", "m-2"] == executions.order
    executions.fail.clear()
    assert [] == failed(handler(event, FakeLambdaContext(CONTEXT_MS)))
    assert ["m-0", "m-1", "m-2", "m-2", "m-3", "m-4"] == executions.order


def test_business_key_deduplicates_across_messages_and_batches(
    dynamodb_store: DynamoDBPersistenceLayer,
) -> None:
    """Messages carrying one order run once, in the same batch or a later one."""
    executions = Executions()
    handler = idempotent_sqs_handler(persistence_store=dynamodb_store, config=BUSINESS_KEY)(
        executions
    )
    first = {"Records": [message("m-1", {"order_id": 1}), message("m-2", {"order_id": 1})]}
    second = {"Records": [message("m-3", {"order_id": 1}), message("m-4", {"order_id": 2})]}
    assert [] == failed(handler(first, FakeLambdaContext(CONTEXT_MS)))
    assert [] == failed(handler(second, FakeLambdaContext(CONTEXT_MS)))
    assert {1: 1, 2: 1} == dict(executions.per_order)


def test_concurrent_option_executes_each_key_exactly_once(
    dynamodb_store: DynamoDBPersistenceLayer,
) -> None:
    """Duplicates in flight together fail and are redelivered; every order runs exactly once."""
    executions = Executions()
    handler = idempotent_sqs_handler(
        persistence_store=dynamodb_store, config=BUSINESS_KEY, max_concurrency=8
    )(executions)
    records = [message(f"m-{n}", {"order_id": n % 10}) for n in range(40)]
    pending = records
    for _delivery in range(10):
        if not pending:
            break
        reported = set(failed(handler({"Records": pending}, FakeLambdaContext(CONTEXT_MS))))
        pending = [r for r in pending if r["messageId"] in reported]
    assert [] == pending
    assert dict.fromkeys(range(10), 1) == dict(executions.per_order)


def test_two_invocations_racing_on_one_batch_execute_each_message_once(
    dynamodb_store: DynamoDBPersistenceLayer,
) -> None:
    """Two Lambda instances get the same messages at once: each message still runs once."""
    executions = Executions()
    handler = idempotent_sqs_handler(persistence_store=dynamodb_store, max_concurrency=4)(
        executions
    )
    event = {"Records": [message(f"m-{n}", {"order_id": n}) for n in range(20)]}
    responses: list[Mapping[str, Any]] = []
    start = threading.Barrier(2)

    def invoke() -> None:
        start.wait()
        responses.append(handler(event, FakeLambdaContext(CONTEXT_MS)))

    threads = [threading.Thread(target=invoke) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert dict.fromkeys(range(20), 1) == dict(executions.per_order)
    left = set(failed(responses[0])) & set(failed(responses[1]))
    assert set() == left


def test_one_order_id_from_two_tenants_queues_runs_for_each(
    dynamodb_store: DynamoDBPersistenceLayer,
) -> None:
    """One function on two tenants' queues: tenant A's order 1 never acknowledges tenant B's."""
    executions = Executions()
    handler = idempotent_sqs_handler(persistence_store=dynamodb_store, config=BUSINESS_KEY)(
        executions
    )
    tenant_b = "arn:aws:sqs:us-east-1:210987654321:orders"
    event = {
        "Records": [message("a-1", {"order_id": 1}), message("b-1", {"order_id": 1}, arn=tenant_b)]
    }
    assert [] == failed(handler(event, FakeLambdaContext(CONTEXT_MS)))
    assert [] == failed(handler(event, FakeLambdaContext(CONTEXT_MS)))  # redelivered: replays
    assert {1: 2} == dict(executions.per_order)
    assert ["a-1", "b-1"] == sorted(executions.order)
