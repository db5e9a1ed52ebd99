"""Worker processes of the reliability suite: load with duplicates, and a worker to SIGKILL.

Spawned (``multiprocessing`` spawn context), so a worker imports only this module, the library
and boto3. Every worker builds its own clients. Side effects go to a separate *ledger* table
with conditional writes: the first execution for a key creates its ledger item
(``attribute_not_exists``); any further execution finds it and is counted there as a duplicate.
Each worker also captures its own log output and counts records that contain the planted secret.
"""

from __future__ import annotations

import collections
import logging
import os
import random
import time
import uuid
from typing import Any

from tests.reliability._support import SECRET

STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-01-01T00:00:00.000"
#: Remaining time of every invocation, hence its records' lease: so long that no lease can pass
#: while its body still runs, however slow a loaded machine makes a batch (no worker crashes here).
LEASE_MS = 600_000


class _LeakCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records = 0
        self.leaks = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.records += 1
        text = record.getMessage() + repr(record.__dict__)
        if record.exc_info:
            text += logging.Formatter().formatException(record.exc_info)
        if SECRET in text:
            self.leaks += 1


def _capture_logs() -> _LeakCounter:
    handler = _LeakCounter()
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger("idempotent_lambda").setLevel(logging.DEBUG)
    return handler


class Ledger:
    """Record side effects with conditional writes; count executions and their order."""

    def __init__(self, client: Any, table: str, run: str) -> None:
        self.client, self.table, self.run = client, table, run

    def execute(self, key: str, token: str) -> None:
        """Record one execution of the body for ``key``."""
        order = self.client.update_item(
            TableName=self.table,
            Key={"pk": {"S": f"{self.run}#order-counter"}},
            UpdateExpression="ADD n :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
            ReturnValues="UPDATED_NEW",
        )["Attributes"]["n"]["N"]
        try:
            self.client.put_item(
                TableName=self.table,
                Item={
                    "pk": {"S": f"{self.run}#{key}"},
                    "token": {"S": token},
                    "order": {"N": order},
                    "pid": {"N": str(os.getpid())},
                },
                ConditionExpression="attribute_not_exists(pk)",
            )
        except self.client.exceptions.ConditionalCheckFailedException:
            self.client.update_item(
                TableName=self.table,
                Key={"pk": {"S": f"{self.run}#{key}"}},
                UpdateExpression="ADD duplicates :one",
                ExpressionAttributeValues={":one": {"N": "1"}},
            )


def _clients(endpoint: str) -> tuple[Any, Any]:
    import boto3

    os.environ["AWS_ENDPOINT_URL_DYNAMODB"] = endpoint
    session = boto3.session.Session()
    ledger = session.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")
    return session, ledger


def _await_start(ready: Any, start: Any) -> None:
    ready.release()
    start.wait(120)


def _summary(started: float, logs: _LeakCounter, **figures: Any) -> dict[str, Any]:
    return {
        "elapsed_s": time.perf_counter() - started,
        "log_records": logs.records,
        "log_leaks": logs.leaks,
        **figures,
    }


def _blocks(keys: int, repeats: int, seed: int) -> list[int]:
    """Every key ``repeats`` times, in blocks of 10 keys shuffled per process: all processes
    hammer the same few keys at the same moment, each in its own interleaving."""
    rng = random.Random(seed)
    order: list[int] = []
    for block in range(0, keys, 10):
        chunk = [k for k in range(block, min(block + 10, keys)) for _ in range(repeats)]
        rng.shuffle(chunk)
        order.extend(chunk)
    return order


def decorator_load(
    endpoint: str,
    table: str,
    ledger_table: str,
    run: str,
    worker: int,
    invocations: int,
    keys: int,
    wait_seconds: float,
    work_ms: int,
    ready: Any,
    start: Any,
    results: Any,
) -> None:
    """Make ``invocations`` calls of an `idempotent` handler over ``keys`` keys; report them.

    A call refused with `IdempotencyAlreadyInProgressError` is retried after 50 ms, as a client
    would; the first outcome of each call and its final result are both reported.
    """
    logs = _capture_logs()
    from idempotent_lambda import (
        DynamoDBPersistenceLayer,
        IdempotencyAlreadyInProgressError,
        IdempotencyConfig,
        idempotent,
    )
    from idempotent_lambda.testing import FakeLambdaContext

    session, ledger_client = _clients(endpoint)
    ledger = Ledger(ledger_client, ledger_table, run)
    store = DynamoDBPersistenceLayer(table, boto3_session=session)
    config = IdempotencyConfig(
        event_key_jmespath="order_id", wait_for_in_progress_seconds=wait_seconds
    )

    @idempotent(persistence_store=store, config=config, key_prefix=f"load-{run}")
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        token = uuid.uuid4().hex
        ledger.execute(f"order-{event['order_id']}", token)
        time.sleep(work_ms / 1000)
        return {"order_id": event["order_id"], "token": token, "card": SECRET}

    sequence = _blocks(keys, invocations // keys, seed=worker)
    store.get("warm-up")  # build the client and open the connection before the race
    _await_start(ready, start)
    started = time.perf_counter()
    first: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()
    tokens: dict[int, set[str]] = collections.defaultdict(set)
    retries = 0
    for order_id in sequence:
        event = {"order_id": order_id, "card": SECRET}
        attempt = 0
        while True:
            try:
                result = handler(event, FakeLambdaContext(LEASE_MS))
            except IdempotencyAlreadyInProgressError:
                if attempt == 0:
                    first["IdempotencyAlreadyInProgressError"] += 1
                if attempt == 2000:  # 100 s of retries: the key is stuck; count, move on
                    errors["gave up: still in progress"] += 1
                    break
                attempt += 1
                retries += 1
                time.sleep(0.05)
                continue
            except Exception as exc:  # counted, not raised: the parent asserts on the counts
                errors[type(exc).__name__] += 1
                break
            if attempt == 0:
                first["result"] += 1
            tokens[order_id].add(result["token"])
            assert result["card"] == SECRET
            break
    results.put(
        _summary(
            started,
            logs,
            worker=worker,
            invocations=len(sequence),
            first_outcomes=dict(first),
            errors=dict(errors),
            retries=retries,
            tokens={k: sorted(v) for k, v in tokens.items()},
        )
    )


def _sqs_record(message_id: str, order_id: int) -> dict[str, Any]:
    import json

    return {
        "messageId": message_id,
        "receiptHandle": f"rh-{message_id}",
        "body": json.dumps({"order_id": order_id, "card": SECRET}),
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1767225600000"},
        "messageAttributes": {},
        "md5OfBody": "0" * 32,
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
        "awsRegion": "us-east-1",
    }


def sqs_load(
    endpoint: str,
    table: str,
    ledger_table: str,
    run: str,
    worker: int,
    invocations: int,
    keys: int,
    wait_seconds: float,
    work_ms: int,
    ready: Any,
    start: Any,
    results: Any,
) -> None:
    """Deliver ``invocations`` SQS messages over ``keys`` order ids in overlapping batches.

    Each order id is sent as several distinct messages (a producer's duplicates); batches are
    windows of 10 deliveries advancing by 5, so every message arrives twice (overlap); records
    reported in ``batchItemFailures`` are delivered again in a later batch (redelivery).
    """
    logs = _capture_logs()
    from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig
    from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler
    from idempotent_lambda.testing import FakeLambdaContext

    session, ledger_client = _clients(endpoint)
    ledger = Ledger(ledger_client, ledger_table, run)
    store = DynamoDBPersistenceLayer(table, boto3_session=session)
    config = IdempotencyConfig(
        event_key_jmespath="powertools_json(body).order_id",
        wait_for_in_progress_seconds=wait_seconds,
    )

    @idempotent_sqs_handler(persistence_store=store, config=config, key_prefix=f"sqs-{run}")
    def handle(record: SQSRecord, context: Any) -> dict[str, Any]:
        order_id = record.json_body["order_id"]
        token = uuid.uuid4().hex
        ledger.execute(f"order-{order_id}", token)
        time.sleep(work_ms / 1000)
        return {"order_id": order_id, "token": token, "card": SECRET}

    deliveries = [
        _sqs_record(f"w{worker}-m{n}", order_id)
        for n, order_id in enumerate(_blocks(keys, invocations // keys, seed=worker))
    ]
    store.get("warm-up")
    _await_start(ready, start)
    started = time.perf_counter()
    done: set[str] = set()
    redeliver: collections.deque[dict[str, Any]] = collections.deque()
    failures: collections.Counter[str] = collections.Counter()
    delivered = batches = 0
    position = 0
    give_up = time.monotonic() + 600
    while (position < len(deliveries) or redeliver) and time.monotonic() < give_up:
        batch = deliveries[position : position + 10]
        position += 5
        while redeliver and len(batch) < 15:
            batch.append(redeliver.popleft())
        response = handle({"Records": batch}, FakeLambdaContext(LEASE_MS))
        batches += 1
        delivered += len(batch)
        failed = {item["itemIdentifier"] for item in response["batchItemFailures"]}
        for record in batch:
            if record["messageId"] in failed:
                failures["reported failed"] += 1
                redeliver.append(record)
                time.sleep(0.005)
            else:
                done.add(record["messageId"])
    results.put(
        _summary(
            started,
            logs,
            worker=worker,
            messages=len(deliveries),
            acknowledged=len(done),
            deliveries=delivered,
            batches=batches,
            failures=dict(failures),
        )
    )


def stream_records(count: int, items: int) -> list[dict[str, Any]]:
    """Return ``count`` stream records (MODIFY) over ``items`` item keys, in stream order."""
    return [
        {
            "eventID": f"event-{n}",
            "eventName": "MODIFY",
            "eventVersion": "1.1",
            "eventSource": "aws:dynamodb",
            "awsRegion": "us-east-1",
            "eventSourceARN": STREAM_ARN,
            "dynamodb": {
                "ApproximateCreationDateTime": 1767225600 + n,
                "Keys": {"pk": {"S": f"item-{n % items}"}},
                "NewImage": {
                    "pk": {"S": f"item-{n % items}"},
                    "version": {"N": str(n)},
                    "card": {"S": SECRET},
                },
                "SequenceNumber": f"{n + 1:021d}",
                "SizeBytes": 64,
                "StreamViewType": "NEW_IMAGE",
            },
        }
        for n in range(count)
    ]


def stream_load(
    endpoint: str,
    table: str,
    ledger_table: str,
    run: str,
    worker: int,
    invocations: int,
    keys: int,
    wait_seconds: float,
    work_ms: int,
    ready: Any,
    start: Any,
    results: Any,
) -> None:
    """Read a stream of ``keys`` records as a Lambda poller would, until at least
    ``invocations`` record deliveries were made and every record was acknowledged once: batches
    of 10, each next batch overlapping the last by 5, resuming at the first failed record after
    a partial failure, and wrapping around to the start (a re-read) at the end.
    """
    logs = _capture_logs()
    from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig
    from idempotent_lambda.adapters.dynamodb_stream import (
        DynamoDBStreamRecord,
        idempotent_stream_handler,
    )
    from idempotent_lambda.testing import FakeLambdaContext

    session, ledger_client = _clients(endpoint)
    ledger = Ledger(ledger_client, ledger_table, run)
    store = DynamoDBPersistenceLayer(table, boto3_session=session)
    config = IdempotencyConfig(wait_for_in_progress_seconds=wait_seconds)

    @idempotent_stream_handler(persistence_store=store, config=config, key_prefix=f"st-{run}")
    def handle(record: DynamoDBStreamRecord, context: Any) -> str:
        token = uuid.uuid4().hex
        ledger.execute(f"seq-{record.sequence_number}", token)
        time.sleep(work_ms / 1000)
        return token

    records = stream_records(keys, max(keys // 4, 1))
    index = {r["dynamodb"]["SequenceNumber"]: n for n, r in enumerate(records)}
    store.get("warm-up")
    _await_start(ready, start)
    started = time.perf_counter()
    failures: collections.Counter[str] = collections.Counter()
    acknowledged: set[int] = set()
    delivered = batches = position = 0
    give_up = time.monotonic() + 600
    while (delivered < invocations or len(acknowledged) < len(records)) and (
        time.monotonic() < give_up
    ):
        batch = records[position : position + 10]
        response = handle({"Records": batch}, FakeLambdaContext(LEASE_MS))
        batches += 1
        delivered += len(batch)
        failed = [index[item["itemIdentifier"]] for item in response["batchItemFailures"]]
        failures["reported failed"] += len(failed)
        acknowledged.update(position + n for n in range(len(batch)) if position + n not in failed)
        if failed:
            position = min(failed)  # Lambda resumes from the lowest failed sequence number
            time.sleep(0.005)
        else:
            position += 5
        if position >= len(records):
            position = 0
    results.put(
        _summary(
            started,
            logs,
            worker=worker,
            deliveries=delivered,
            acknowledged=len(acknowledged),
            batches=batches,
            failures=dict(failures),
        )
    )


def hold_a_claim(
    endpoint: str, table: str, lease_ms: int, executions_file: str, claimed: Any
) -> None:
    """Start an HTTP request whose handler never finishes: the parent SIGKILLs this process."""
    from idempotent_lambda import DynamoDBPersistenceLayer
    from idempotent_lambda.adapters.api_gateway import idempotent_http
    from idempotent_lambda.testing import FakeLambdaContext

    session, _ = _clients(endpoint)
    store = DynamoDBPersistenceLayer(table, boto3_session=session)

    @idempotent_http(persistence_store=store, key_prefix="killed")
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        fd = os.open(executions_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{os.getpid()}\n".encode())
        finally:
            os.close(fd)
        claimed.set()
        time.sleep(600)  # the work; SIGKILL arrives long before it ends
        return {"statusCode": 201, "body": "never"}

    handler(killed_request(), FakeLambdaContext(lease_ms))


def killed_request() -> dict[str, Any]:
    """Return the HTTP API (v2) request the killed worker and the parent both send."""
    return {
        "version": "2.0",
        "routeKey": "POST /orders",
        "rawPath": "/orders",
        "rawQueryString": "",
        "headers": {"idempotency-key": "order-kill-1", "content-type": "application/json"},
        "requestContext": {
            "http": {"method": "POST", "path": "/orders"},
            "authorizer": {"jwt": {"claims": {"sub": "user-1"}}},
            "requestId": str(uuid.uuid4()),
        },
        "body": '{"amount": 42, "card": "' + SECRET + '"}',
        "isBase64Encoded": False,
    }
