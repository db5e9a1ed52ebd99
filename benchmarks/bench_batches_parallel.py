"""Batches under a parallel 5 ms store: ours vs Powertools, with a store that overlaps requests.

``bench_batches`` runs against moto's server, which answers one request at a time, so no library
can gain from sending requests in parallel there. This benchmark keeps the same batches, handlers,
checks and cost rules, and swaps the store for an in-process dict behind a wrapper that sleeps a
fixed ``--latency-ms`` (5 ms by default) per request. ``time.sleep`` releases the GIL, so
requests from different threads overlap, as DynamoDB serves them.

Stores (one per library, each a dict guarded by a lock, sleep outside the lock, then the
operation is applied atomically):

- ours: `InMemoryPersistenceLayer` wrapped by `SlowStore`: ``claim``, ``complete``,
  ``release``, ``get`` are one request each; ``get_many`` is one request per 100 keys (as the
  DynamoDB layer's ``BatchGetItem`` chunks). Counted as the operation our DynamoDB layer sends:
  PutItem, PutItem, DeleteItem, GetItem, BatchGetItem.
- Powertools: `SlowPowertoolsStore`, the benchmark's `PowertoolsInMemoryPersistenceLayer`
  (the put condition of Powertools' DynamoDB layer, the old record returned on a failed put as
  with ``ReturnValuesOnConditionCheckFailure``) with ``_put_record``, ``_get_record``,
  ``_update_record``, ``_delete_record`` one request each: PutItem, GetItem, UpdateItem,
  DeleteItem.

Neither side pays botocore's per-request CPU (building, signing, parsing): both lose it alike.

Run: ``python -m benchmarks.bench_batches_parallel`` (needs the ``bench`` extra: Powertools).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.bench_batches import (
    KINDS,
    READ_PRICE,
    WRITE_PRICE,
    WRITES,
    Delivery,
    Result,
    _cost,
    _median,
    _ops,
    identifier,
    identifier_of,
    make_event,
    powertools_handler,
    same_answer,
)
from benchmarks.bench_sqs import BenchmarkError, LambdaContext
from benchmarks.powertools_memory import PowertoolsInMemoryPersistenceLayer

Handler = Callable[[dict[str, Any], Any], Any]
#: Build a batch handler on (kind, latency meter, record handler body).
Builder = Callable[[str, "Latency", Callable[[str], None]], Handler]
BATCH_GET_LIMIT = 100  # keys per BatchGetItem request


class Latency:
    """The simulated network: sleeps a fixed time per request and counts what was sent."""

    def __init__(self, latency_ms: float) -> None:
        self.latency_s = latency_ms / 1000
        self.lock = threading.Lock()
        self.operations: Counter[str] = Counter()
        self.write_units = 0
        self.read_units = 0

    def request(self, operation: str, items: int = 1) -> None:
        """Pay one request's latency and count it (``items``: keys read by a BatchGetItem,
        items written by a BatchWriteItem)."""
        with self.lock:
            self.operations[operation] += 1
            if operation in WRITES or operation == "BatchWriteItem":
                self.write_units += items  # every item here is < 1 KB; a failed condition too
            else:
                self.read_units += items  # strongly consistent, < 4 KB per item
        time.sleep(self.latency_s)

    def reset(self) -> None:
        """Forget what was counted."""
        with self.lock:
            self.operations.clear()
            self.write_units = self.read_units = 0

    def delivery(self, wall_s: float) -> Delivery:
        """Return what was counted as one delivery."""
        with self.lock:
            return Delivery(wall_s, dict(self.operations), self.write_units, self.read_units)


class SlowStore:
    """Our `InMemoryPersistenceLayer` behind a fixed latency per request."""

    def __init__(self, latency: Latency) -> None:
        from idempotent_lambda.persistence.in_memory import InMemoryPersistenceLayer

        self._inner = InMemoryPersistenceLayer()
        self._latency = latency
        self.clock = self._inner.clock

    def claim(self, record: Any, *, now_ms: int, lease_cutoff_ms: int) -> Any:
        """Conditional PutItem of the IN_PROGRESS record."""
        self._latency.request("PutItem")
        return self._inner.claim(record, now_ms=now_ms, lease_cutoff_ms=lease_cutoff_ms)

    def complete(self, record: Any) -> bool:
        """Conditional PutItem of the COMPLETED record."""
        self._latency.request("PutItem")
        return self._inner.complete(record)

    def unconditional_write_ms(self) -> int:
        """The bound of the store's default client (28 s): the leases here are 10 minutes."""
        return 28_000

    def put_completed(self, records: Sequence[Any], *, send_by_ms: int | None = None) -> list[Any]:
        """BatchWriteItem of up to 25 completions: one request (here each still owned)."""
        self._latency.request("BatchWriteItem", len(records))
        for record in records:
            self._inner.complete(record)
        return []

    def delete_claims(
        self, idempotency_keys: Sequence[str], *, send_by_ms: int | None = None
    ) -> list[str]:
        """BatchWriteItem of up to 25 deletes: one request (here each still owned)."""
        self._latency.request("BatchWriteItem", len(idempotency_keys))
        for key in idempotency_keys:
            record = self._inner.get(key)
            if record is not None:
                self._inner.release(key, record.owner or "")
        return []

    def release(self, idempotency_key: str, owner: str) -> bool:
        """Conditional DeleteItem."""
        self._latency.request("DeleteItem")
        return self._inner.release(idempotency_key, owner)

    def get(self, idempotency_key: str) -> Any:
        """Strongly consistent GetItem."""
        self._latency.request("GetItem")
        return self._inner.get(idempotency_key)

    def get_many(self, idempotency_keys: Sequence[str]) -> dict[str, Any]:
        """BatchGetItem: one request per 100 keys, one after another."""
        unique = list(dict.fromkeys(idempotency_keys))
        found: dict[str, Any] = {}
        for start in range(0, len(unique), BATCH_GET_LIMIT):
            chunk = unique[start : start + BATCH_GET_LIMIT]
            self._latency.request("BatchGetItem", len(chunk))
            found.update(self._inner.get_many(chunk))
        return found


class SlowPowertoolsStore(PowertoolsInMemoryPersistenceLayer):
    """Powertools' persistence contract on a dict, behind a fixed latency per request."""

    def __init__(self, latency: Latency) -> None:
        super().__init__()
        self._latency = latency

    def _put_record(self, data_record: Any) -> None:
        self._latency.request("PutItem")
        super()._put_record(data_record)

    def _get_record(self, idempotency_key: str) -> Any:
        self._latency.request("GetItem")
        return super()._get_record(idempotency_key)

    def _update_record(self, data_record: Any) -> None:
        self._latency.request("UpdateItem")
        super()._update_record(data_record)

    def _delete_record(self, data_record: Any) -> None:
        self._latency.request("DeleteItem")
        super()._delete_record(data_record)


# --- variants (the same wiring as bench_batches, on these stores) ------------------------------


def build_powertools(kind: str, latency: Latency, body: Callable[[str], None]) -> Handler:
    """Powertools: its batch processor for ``kind`` + ``idempotent_function`` per record."""
    return powertools_handler(kind, SlowPowertoolsStore(latency), body)


def build_ours(kind: str, latency: Latency, body: Callable[[str], None]) -> Handler:
    """Ours: the adapter for ``kind`` with its defaults (default keys, 16 lanes)."""
    from idempotent_lambda.adapters.dynamodb_stream import idempotent_stream_handler
    from idempotent_lambda.adapters.sqs import idempotent_sqs_handler

    adapter = idempotent_stream_handler if kind == "stream" else idempotent_sqs_handler

    @adapter(persistence_store=SlowStore(latency))
    def handler(record: Any, context: Any) -> dict[str, Any]:
        body(identifier(record))
        return {"processed": identifier(record)}

    return handler


VARIANTS: dict[str, Builder] = {"powertools": build_powertools, "ours": build_ours}


# --- measuring ---------------------------------------------------------------------------------


def run_once(
    builder: Builder, kind: str, *, records: int, latency_ms: float, work_ms: float
) -> tuple[Delivery, Delivery]:
    """Measure a first delivery and a full redelivery of one batch, on fresh stores."""
    latency = Latency(latency_ms)
    ran: list[str] = []
    lock = threading.Lock()

    def body(name: str) -> None:
        with lock:
            ran.append(name)
        if work_ms:
            time.sleep(work_ms / 1000)

    handler = builder(kind, latency, body)
    run = uuid.uuid4().hex[:8]
    deliveries = []
    for receive_count, expected in (("1", records), ("2", 0)):
        event = make_event(kind, records, receive_count, run)
        ran.clear()
        latency.reset()
        started = time.perf_counter()
        response = handler(event, LambdaContext())
        wall = time.perf_counter() - started
        if response.get("batchItemFailures") or len(ran) != expected:
            raise BenchmarkError(
                f"{kind}: expected {expected} runs and no failures, got {len(ran)} runs and "
                f"{len(response.get('batchItemFailures') or [])} failures"
            )
        deliveries.append(latency.delivery(wall))
    return deliveries[0], deliveries[1]


def failure_answers(kind: str, records: int, latency_ms: float) -> dict[str, list[str]]:
    """Return each variant's answer to a batch whose every tenth record fails."""
    answers = {}
    run = uuid.uuid4().hex[:8]
    for variant, builder in VARIANTS.items():
        event = make_event(kind, records, "1", run)
        failing = {identifier_of(raw) for raw in event["Records"][3::10]}

        def body(name: str, failing: set[str] = failing) -> None:
            if name in failing:
                raise RuntimeError("refused")

        response = builder(kind, Latency(latency_ms), body)(event, LambdaContext())
        answers[variant] = [f["itemIdentifier"] for f in response["batchItemFailures"]]
    return answers


def run_all(args: argparse.Namespace) -> list[Result]:
    """Run every kind, alternating the variants run by run, after a discarded warm-up each."""
    options = {"records": args.records, "latency_ms": args.latency_ms, "work_ms": args.work_ms}
    results = {(kind, variant): Result(kind, variant) for kind in KINDS for variant in VARIANTS}
    for kind in KINDS:
        for builder in VARIANTS.values():
            run_once(builder, kind, **{**options, "records": 10})
        for _ in range(args.runs):
            for variant, builder in VARIANTS.items():
                first, again = run_once(builder, kind, **options)
                results[kind, variant].first.append(first)
                results[kind, variant].again.append(again)
    return list(results.values())


# --- report ------------------------------------------------------------------------------------


def report(results: list[Result], answers: dict[str, dict[str, list[str]]], args: Any) -> str:
    """Return the results as Markdown tables."""
    lines = [
        f"Batches of {args.records} records, {args.latency_ms:g} ms per store request (requests "
        f"overlap), {args.work_ms:g} ms of handler work, median of {args.runs} runs.",
        "",
        "| batch | delivery | Powertools | ours | ours / Powertools | target "
        "| requests (Powertools; ours) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    cost_lines = [
        "| batch | delivery | Powertools WRU + RRU | ours WRU + RRU | Powertools $/M records "
        "| ours $/M records |",
        "|---|---|---:|---:|---:|---:|",
    ]
    verdicts = []
    for kind in KINDS:
        theirs = next(r for r in results if r.kind == kind and r.variant == "powertools")
        ours = next(r for r in results if r.kind == kind and r.variant == "ours")
        for label, target, pick in (
            ("first", 0.2, lambda r: r.first),
            ("redelivery", 0.05, lambda r: r.again),
        ):
            t, o = _median(pick(theirs)), _median(pick(ours))
            ratio = o.wall_s / t.wall_s
            spread = [d.wall_s / p.wall_s for d, p in zip(pick(ours), pick(theirs), strict=True)]
            verdicts.append(ratio <= target)
            lines.append(
                f"| {kind} | {label} | {t.wall_s * 1000:.0f} ms | {o.wall_s * 1000:.1f} ms | "
                f"{ratio:.3f}x (runs {min(spread):.3f}-{max(spread):.3f}) | "
                f"<= {target}x {'met' if ratio <= target else 'NOT met'} | {_ops(t)}; {_ops(o)} |"
            )
            cost_lines.append(
                f"| {kind} | {label} | {t.write_units} + {t.read_units} | "
                f"{o.write_units} + {o.read_units} | {_cost(t, args.records):.3f} | "
                f"{_cost(o, args.records):.3f} |"
            )
    same = [
        f"{kind}: {'same' if same_answer(kind, answers[kind]) else 'DIFFERENT'} "
        f"(Powertools reports {len(answers[kind]['powertools'])}, ours "
        f"{len(answers[kind]['ours'])})"
        for kind in KINDS
    ]
    return "\n".join(
        [
            *lines,
            "",
            "Request units (WRU: write, RRU: read) per batch of "
            f"{args.records}, and on-demand cost per million records "
            f"(${WRITE_PRICE}/M WRU, ${READ_PRICE}/M RRU):",
            "",
            *cost_lines,
            "",
            "Partial-batch answers with every tenth record failing: " + "; ".join(same),
            f"All targets met: {'yes' if all(verdicts) else 'NO'}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the report; exit 1 when a run misbehaved."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--latency-ms", type=float, default=5.0)
    parser.add_argument("--work-ms", type=float, default=0.0)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    os.environ.pop("POWERTOOLS_IDEMPOTENCY_DISABLED", None)
    os.environ.pop("IDEMPOTENCY_DISABLED", None)
    try:
        results = run_all(args)
        answers = {kind: failure_answers(kind, args.records, args.latency_ms) for kind in KINDS}
    except BenchmarkError as exc:
        print(f"benchmark aborted: {exc}", file=sys.stderr)
        return 1
    if any(not same_answer(kind, answers[kind]) for kind in KINDS):
        print(report(results, answers, args))
        return 1
    print(report(results, answers, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
