"""Load with duplicates: many processes, few keys, one moto server, side effects counted.

Worker processes (spawn context, each with its own boto3 clients) invoke idempotent handlers
against the moto server on 127.0.0.1; every execution of a body writes to a separate ledger
table with a conditional write (`_workers.Ledger`). Afterwards the ledger is scanned: every key
must have been executed exactly once, every caller of a key must have received the same result,
and no log record of any worker may contain the planted secret.

The fast suite runs a scaled-down version (4 processes); the full runs (8 processes x 1,000
invocations over 200 keys) are marked ``slow``; their figures are in docs/reliability.md.
Figures are printed as a ``RELIABILITY-FIGURES`` JSON line (use ``-s``), and appended to the
file named by ``$RELIABILITY_FIGURES`` when set.
"""

from __future__ import annotations

import collections
import itertools
import json
import multiprocessing
import os
import queue
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.reliability import _workers

FAST = {"processes": 4, "invocations": 100, "keys": 20}
FULL = {"processes": 8, "invocations": 1000, "keys": 200}
WORK_MS = 20
START_TIMEOUT_S = 120
RUN_TIMEOUT_S = 900


@pytest.fixture
def ledger_table(dynamodb_client: Any) -> Any:
    """Return a fresh side-effect ledger table (partition key ``pk``), deleted afterwards."""
    name = f"ledger-{uuid.uuid4().hex[:12]}"
    dynamodb_client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    yield name
    dynamodb_client.delete_table(TableName=name)


def run_workers(
    target: Callable[..., None], endpoint: str, table: str, ledger: str, *, wait: float, **size: int
) -> tuple[str, list[dict[str, Any]], float]:
    """Start the workers together, collect their summaries; return run id, summaries, seconds."""
    context = multiprocessing.get_context("spawn")
    ready, start, results = context.Semaphore(0), context.Event(), context.Queue()
    run = uuid.uuid4().hex[:8]
    workers = [
        context.Process(
            target=target,
            args=(
                endpoint,
                table,
                ledger,
                run,
                index,
                size["invocations"],
                size["keys"],
                wait,
                WORK_MS,
                ready,
                start,
                results,
            ),
        )
        for index in range(size["processes"])
    ]
    for worker in workers:
        worker.start()
    summaries: list[dict[str, Any]] = []
    try:
        for _ in workers:
            assert ready.acquire(timeout=START_TIMEOUT_S), "a worker did not start"
        started = time.perf_counter()
        start.set()
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while len(summaries) < len(workers):
            try:
                summaries.append(results.get(timeout=max(deadline - time.monotonic(), 0.1)))
            except queue.Empty:
                pytest.fail(f"{len(workers) - len(summaries)} worker(s) did not finish")
        elapsed = time.perf_counter() - started
    finally:
        for worker in workers:
            worker.join(30)
            if worker.is_alive():
                worker.kill()
    assert [0] * len(workers) == [worker.exitcode for worker in workers]
    return run, summaries, elapsed


def ledger_counts(client: Any, ledger: str, run: str) -> dict[str, dict[str, int]]:
    """Return ``{key: {"executions": n, "order": global execution number}}`` for one run."""
    counts: dict[str, dict[str, int]] = {}
    paginator = client.get_paginator("scan")
    for page in paginator.paginate(TableName=ledger, ConsistentRead=True):
        for item in page["Items"]:
            pk = item["pk"]["S"]
            if not pk.startswith(f"{run}#") or pk.endswith("#order-counter"):
                continue
            counts[pk.split("#", 1)[1]] = {
                "executions": 1 + int(item.get("duplicates", {"N": "0"})["N"]),
                "order": int(item["order"]["N"]),
            }
    return counts


def report(figures: dict[str, Any]) -> None:
    """Print the figures, and append them to ``$RELIABILITY_FIGURES`` when set."""
    line = json.dumps(figures, sort_keys=True)
    print(f"RELIABILITY-FIGURES {line}")
    path = os.environ.get("RELIABILITY_FIGURES")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(line + "\n")


def check_decorator_load(
    dynamodb_endpoint: str,
    idempotency_table: str,
    ledger_table: str,
    dynamodb_client: Any,
    *,
    wait: float,
    size: dict[str, int],
) -> dict[str, Any]:
    run, summaries, elapsed = run_workers(
        _workers.decorator_load,
        dynamodb_endpoint,
        idempotency_table,
        ledger_table,
        wait=wait,
        **size,
    )
    counts = ledger_counts(dynamodb_client, ledger_table, run)
    tokens: dict[str, set[str]] = collections.defaultdict(set)
    first: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()
    for summary in summaries:
        for key, values in summary["tokens"].items():
            tokens[f"order-{key}"].update(values)
        first.update(summary["first_outcomes"])
        errors.update(summary["errors"])
    invocations = sum(s["invocations"] for s in summaries)
    figures = {
        "run": "decorator",
        "wait_for_in_progress_seconds": wait,
        **size,
        "invocations": invocations,
        "duplicates": invocations - size["keys"],
        "executions": sum(c["executions"] for c in counts.values()),
        "executions_per_key": dict(collections.Counter(c["executions"] for c in counts.values())),
        "keys_executed": len(counts),
        "keys_with_mismatched_results": sum(1 for v in tokens.values() if len(v) != 1),
        "first_outcomes": dict(first),
        "in_progress_retries": sum(s["retries"] for s in summaries),
        "errors": dict(errors),
        "log_records_checked": sum(s["log_records"] for s in summaries),
        "log_leaks": sum(s["log_leaks"] for s in summaries),
        "elapsed_s": round(elapsed, 1),
        "invocations_per_s": round(invocations / elapsed),
    }
    report(figures)
    assert {"1": size["keys"]} == {str(k): v for k, v in figures["executions_per_key"].items()}
    assert size["keys"] == len(tokens)
    assert 0 == figures["keys_with_mismatched_results"]
    assert {} == figures["errors"]
    assert 0 == figures["log_leaks"]
    # every token handed out is the one the single execution stored
    assert all(len(values) == 1 for values in tokens.values())
    return figures


def check_sqs_load(
    dynamodb_endpoint: str,
    idempotency_table: str,
    ledger_table: str,
    dynamodb_client: Any,
    *,
    wait: float,
    size: dict[str, int],
) -> dict[str, Any]:
    run, summaries, elapsed = run_workers(
        _workers.sqs_load, dynamodb_endpoint, idempotency_table, ledger_table, wait=wait, **size
    )
    counts = ledger_counts(dynamodb_client, ledger_table, run)
    failures: collections.Counter[str] = collections.Counter()
    for summary in summaries:
        failures.update(summary["failures"])
    deliveries = sum(s["deliveries"] for s in summaries)
    figures = {
        "run": "sqs",
        "wait_for_in_progress_seconds": wait,
        **size,
        "messages": sum(s["messages"] for s in summaries),
        "messages_acknowledged": sum(s["acknowledged"] for s in summaries),
        "record_deliveries": deliveries,
        "batches": sum(s["batches"] for s in summaries),
        "records_reported_failed": failures["reported failed"],
        "executions": sum(c["executions"] for c in counts.values()),
        "executions_per_key": dict(collections.Counter(c["executions"] for c in counts.values())),
        "keys_executed": len(counts),
        "log_records_checked": sum(s["log_records"] for s in summaries),
        "log_leaks": sum(s["log_leaks"] for s in summaries),
        "elapsed_s": round(elapsed, 1),
        "records_per_s": round(deliveries / elapsed),
    }
    report(figures)
    assert figures["messages"] == figures["messages_acknowledged"]
    assert {"1": size["keys"]} == {str(k): v for k, v in figures["executions_per_key"].items()}
    assert 0 == figures["log_leaks"]
    return figures


def check_stream_load(
    dynamodb_endpoint: str,
    idempotency_table: str,
    ledger_table: str,
    dynamodb_client: Any,
    *,
    wait: float,
    size: dict[str, int],
) -> dict[str, Any]:
    run, summaries, elapsed = run_workers(
        _workers.stream_load, dynamodb_endpoint, idempotency_table, ledger_table, wait=wait, **size
    )
    counts = ledger_counts(dynamodb_client, ledger_table, run)
    failures: collections.Counter[str] = collections.Counter()
    for summary in summaries:
        failures.update(summary["failures"])
    # Order is promised per item (different items run concurrently). `stream_records` puts
    # sequence number n + 1 on item n % items.
    items = max(size["keys"] // 4, 1)
    per_item: dict[int, list[int]] = {}
    for sequence, value in sorted(counts.items()):  # "seq-<21 digits>": lexical = stream order
        per_item.setdefault((int(sequence.removeprefix("seq-")) - 1) % items, []).append(
            value["order"]
        )
    out_of_order = sum(
        1 for orders in per_item.values() for a, b in itertools.pairwise(orders) if a > b
    )
    deliveries = sum(s["deliveries"] for s in summaries)
    figures = {
        "run": "dynamodb_stream",
        "wait_for_in_progress_seconds": wait,
        **size,
        "stream_records": size["keys"],
        "workers_that_acknowledged_every_record": sum(
            1 for s in summaries if s["acknowledged"] == size["keys"]
        ),
        "record_deliveries": deliveries,
        "batches": sum(s["batches"] for s in summaries),
        "records_reported_failed": failures["reported failed"],
        "executions": sum(c["executions"] for c in counts.values()),
        "executions_per_key": dict(collections.Counter(c["executions"] for c in counts.values())),
        "keys_executed": len(counts),
        "executions_out_of_item_order": out_of_order,
        "log_records_checked": sum(s["log_records"] for s in summaries),
        "log_leaks": sum(s["log_leaks"] for s in summaries),
        "elapsed_s": round(elapsed, 1),
        "records_per_s": round(deliveries / elapsed),
    }
    report(figures)
    assert {"1": size["keys"]} == {str(k): v for k, v in figures["executions_per_key"].items()}
    assert 0 == out_of_order
    assert size["processes"] == figures["workers_that_acknowledged_every_record"]
    assert 0 == figures["log_leaks"]
    return figures


CHECKS = {"decorator": check_decorator_load, "sqs": check_sqs_load, "stream": check_stream_load}


@pytest.mark.usefixtures("serialised_moto")
@pytest.mark.parametrize(
    ("kind", "wait"),
    [("decorator", 0), ("decorator", 5), ("sqs", 0), ("stream", 0)],
    ids=["decorator-no-wait", "decorator-wait", "sqs", "stream"],
)
def test_scaled_down_load_runs_each_key_once(
    kind: str,
    wait: float,
    dynamodb_endpoint: str,
    idempotency_table: str,
    ledger_table: str,
    dynamodb_client: Any,
) -> None:
    """4 processes with heavy duplication: each key runs once, callers agree, logs are clean."""
    CHECKS[kind](
        dynamodb_endpoint, idempotency_table, ledger_table, dynamodb_client, wait=wait, size=FAST
    )


@pytest.mark.slow
@pytest.mark.usefixtures("serialised_moto")
@pytest.mark.parametrize("wait", [0, 5], ids=["no-wait", "wait"])
@pytest.mark.parametrize("kind", ["decorator", "sqs", "stream"])
def test_full_load_runs_each_key_once(
    kind: str,
    wait: float,
    dynamodb_endpoint: str,
    idempotency_table: str,
    ledger_table: str,
    dynamodb_client: Any,
) -> None:
    """8 processes x 1,000 invocations over 200 keys: each key runs exactly once."""
    CHECKS[kind](
        dynamodb_endpoint, idempotency_table, ledger_table, dynamodb_client, wait=wait, size=FULL
    )
