"""Run the sample scenario against an embedded DynamoDB-compatible server and narrate it.

    python -m samples.demo                          # embedded moto server on 127.0.0.1
    python -m samples.demo --endpoint-url URL       # DynamoDB Local, or a real account

Exits non-zero if any expectation in the transcript fails.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3

from idempotent_lambda import (
    DynamoDBPersistenceLayer,
    IdempotencyAlreadyInProgressError,
    IdempotencyConfig,
    IdempotencyValidationError,
    idempotent,
)
from idempotent_lambda.testing import FakeLambdaContext, create_idempotency_table
from samples.local_server import dynamodb_endpoint


class Transcript:
    """Print numbered steps and checks; remember whether any check failed."""

    def __init__(self) -> None:
        self.failures = 0

    def step(self, text: str) -> None:
        """Print a scenario step."""
        print(f"\n== {text}")

    def note(self, text: str) -> None:
        """Print a detail line."""
        print(f"   {text}")

    def expect(self, what: str, ok: bool) -> None:
        """Print a check and count it if it failed."""
        print(f"   [{'ok' if ok else 'FAILED'}] {what}")
        self.failures += 0 if ok else 1


class CallCounter:
    """Count DynamoDB requests made through a boto3 client."""

    def __init__(self, client: Any) -> None:
        self.count = 0
        self._lock = threading.Lock()
        client.meta.events.register("before-send.dynamodb", self._seen)

    def _seen(self, **_: Any) -> None:
        with self._lock:
            self.count += 1


def build_handler(store: DynamoDBPersistenceLayer) -> tuple[Callable[..., Any], list[str]]:
    """Return a payment handler keyed on ``payment_id`` and the list of executions it records."""
    executions: list[str] = []
    lock = threading.Lock()
    config = IdempotencyConfig(
        event_key_jmespath="payment_id",
        payload_validation_jmespath="amount",
        wait_for_in_progress_seconds=10,
    )

    @idempotent(persistence_store=store, config=config)
    def charge(event: dict[str, Any], context: Any) -> dict[str, Any]:
        with lock:
            executions.append(event["payment_id"])
        return {"payment_id": event["payment_id"], "charge_id": uuid.uuid4().hex, "ok": True}

    return charge, executions


def run(endpoint_url: str) -> int:
    """Play the scenario against ``endpoint_url``; return the number of failed checks."""
    t = Transcript()
    table = f"idempotency-demo-{uuid.uuid4().hex[:8]}"
    client = boto3.client("dynamodb", endpoint_url=endpoint_url, region_name="us-east-1")
    create_idempotency_table(client, table_name=table)
    calls = CallCounter(client)
    store = DynamoDBPersistenceLayer(table, boto3_client=client)
    charge, executions = build_handler(store)
    print(f"DynamoDB endpoint {endpoint_url}, table {table}")

    t.step("1. First call: the handler runs and its result is stored")
    first = charge({"payment_id": "p-1", "amount": 42}, FakeLambdaContext())
    t.note(f"response: {first}")
    t.expect("handler ran once", executions == ["p-1"])

    t.step("2. The same request again: the stored response is replayed")
    before = calls.count
    again = charge({"payment_id": "p-1", "amount": 42}, FakeLambdaContext())
    t.expect("same response (same charge_id)", again == first)
    t.expect("handler did not run again", executions == ["p-1"])
    t.expect("one DynamoDB request for the replay", calls.count - before == 1)

    t.step("3. Same key, different amount: refused")
    try:
        charge({"payment_id": "p-1", "amount": 99}, FakeLambdaContext())
        t.expect("IdempotencyValidationError raised", False)
    except IdempotencyValidationError:
        t.expect("IdempotencyValidationError raised", True)

    t.step("4. Ten concurrent duplicates of a new request")
    event = {"payment_id": "p-2", "amount": 7}
    with ThreadPoolExecutor(max_workers=10) as pool:
        futures = [pool.submit(charge, dict(event), FakeLambdaContext()) for _ in range(10)]
    results, errors = [], []
    for future in futures:
        try:
            results.append(future.result())
        except IdempotencyAlreadyInProgressError as exc:
            errors.append(exc)
    t.note(f"{len(results)} responses, {len(errors)} in-progress errors")
    t.expect("the handler ran exactly once", executions.count("p-2") == 1)
    t.expect("every caller got the same response", len({str(r) for r in results}) == 1)

    t.step("Summary")
    invocations = 13
    t.note(f"invocations: {invocations}, handler executions: {len(executions)}")
    t.note(f"DynamoDB requests: {calls.count}")
    print(f"\n{'all checks passed' if t.failures == 0 else f'{t.failures} check(s) FAILED'}")
    return t.failures


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, start or reuse a server, play the scenario."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint-url", help="use this DynamoDB endpoint instead of moto")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    with dynamodb_endpoint(args.endpoint_url) as endpoint:
        return 1 if run(endpoint) else 0


if __name__ == "__main__":
    sys.exit(main())
