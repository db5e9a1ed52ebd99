"""Per-request CPU overhead of ``idempotent_http`` vs Powertools ``@idempotent`` on API events.

Both libraries decorate the same trivial proxy handler and run on in-memory stores (ours:
`InMemoryPersistenceLayer`; Powertools: the `BasePersistenceLayer` subclass in
``benchmarks/powertools_memory.py``), so what is measured is the library's own work per request:
reading the event, hashing, the state machine, and serialising the response.

Variants, on the same REST API (v1) events of ~3 KB and ~200 KB (``benchmarks/events.py``):

- ``bare``: the undecorated handler (the baseline subtracted from every other variant);
- ``powertools``: ``@idempotent`` with ``event_key_jmespath="powertools_json(body).order_id"``
  (its default md5, no payload validation — the usual Powertools API setup);
- ``powertools + validation``: the same plus
  ``payload_validation_jmespath="powertools_json(body)"``, the closest Powertools gets to our
  default fingerprint;
- ``ours (header)``: ``@idempotent_http`` with the defaults: key from the ``Idempotency-Key``
  header, scoped by method + route + caller, fingerprint of method + path + query + body (sha256);
- ``ours (body key)``: ``@idempotent_http`` with ``event_key_jmespath="body.order_id"`` and no
  header, i.e. the Powertools keying scheme, still with the default fingerprint.

Paths: ``first`` (a new key on every request: claim, run, complete) and ``replay`` (the same
request again: one failed claim, replayed response). A measurement is the CPU time
(``time.process_time_ns``) of a loop over pre-built events divided by its length; each variant is
measured ``--repeats`` times, interleaved in rotating order, and the median kept. Overhead =
median - bare median; ratio = our overhead / Powertools' overhead (below 1: we are cheaper).
Every loop is checked (the body ran on every first-path request and never on a replay).

Run: ``python -m benchmarks.bench_api_gateway`` (needs the ``bench`` extra for Powertools).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.events import KEY_EXPRESSION, VALIDATION_EXPRESSION, EventFactory, event_factories

Handler = Callable[[Any, Any], Any]
BARE, PT, PT_VALIDATION = "bare", "powertools", "powertools + validation"
OURS_HEADER, OURS_BODY_KEY = "ours (header)", "ours (body key)"
VARIANTS = (BARE, PT, PT_VALIDATION, OURS_HEADER, OURS_BODY_KEY)
PATHS = ("first", "replay")
_RESPONSE = {
    "statusCode": 201,
    "headers": {"Content-Type": "application/json"},
    "body": '{"status":"accepted"}',
}


class LambdaContext:
    """The parts of a Lambda context both libraries read, with a fixed remaining time."""

    function_name = "bench-orders"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:bench-orders"
    memory_limit_in_mb = 1024
    aws_request_id = "c6af9ac6-7b61-11e6-9a41-93e8deadbeef"

    def get_remaining_time_in_millis(self) -> int:
        """Return 30 s, as if the invocation had just started."""
        return 30_000


def make_event(factory: EventFactory, order_id: str, *, header: bool) -> dict[str, Any]:
    """Return an event whose body carries ``order_id`` and, if ``header``, the same key."""
    event = factory.make(order_id)
    headers = {k: v for k, v in event["headers"].items() if k.lower() != "idempotency-key"}
    if header:
        headers["Idempotency-Key"] = order_id
    event["headers"] = headers
    event["multiValueHeaders"] = {name: [value] for name, value in headers.items()}
    return event


def decorate(variant: str, handler: Handler) -> Handler:
    """Return ``handler`` decorated as ``variant`` on a fresh store."""
    if variant == BARE:
        return handler
    if variant in (PT, PT_VALIDATION):
        from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig as PtConfig
        from aws_lambda_powertools.utilities.idempotency import idempotent as pt_idempotent

        from benchmarks.powertools_memory import PowertoolsInMemoryPersistenceLayer

        pt_config = PtConfig(
            event_key_jmespath=KEY_EXPRESSION,
            payload_validation_jmespath=VALIDATION_EXPRESSION if variant == PT_VALIDATION else "",
            raise_on_no_idempotency_key=True,
        )
        store = PowertoolsInMemoryPersistenceLayer()
        decorated: Handler = pt_idempotent(persistence_store=store, config=pt_config)(handler)
        return decorated

    from idempotent_lambda import IdempotencyConfig, InMemoryPersistenceLayer
    from idempotent_lambda.adapters.api_gateway import idempotent_http

    config = IdempotencyConfig(
        event_key_jmespath="body.order_id" if variant == OURS_BODY_KEY else ""
    )
    return idempotent_http(persistence_store=InMemoryPersistenceLayer(), config=config)(handler)


def events_for(
    variant: str, factory: EventFactory, path: str, count: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Return the warm-up event and the timed events for one variant (built before timing)."""
    header = variant == OURS_HEADER
    if path == "first":
        warmup = make_event(factory, "ord-warmup", header=header)
        return warmup, [make_event(factory, f"ord-{i:06d}", header=header) for i in range(count)]
    event = make_event(factory, "ord-replayed", header=header)
    return event, [event] * count


def time_once(variant: str, factory: EventFactory, path: str, count: int) -> float:
    """Return the CPU nanoseconds per request of one timed loop."""
    calls = [0]

    def handler(event: Any, context: Any) -> Any:
        calls[0] += 1
        return _RESPONSE

    decorated = decorate(variant, handler)
    warmup, events = events_for(variant, factory, path, count)
    context = LambdaContext()
    first = decorated(warmup, context)
    if first.get("statusCode") != 201 or decorated(warmup, context)["body"] != first["body"]:
        raise RuntimeError(f"{variant}: the warm-up did not run and replay as expected")
    before = calls[0]
    gc.collect()
    started = time.process_time_ns()
    for event in events:
        decorated(event, context)
    elapsed = time.process_time_ns() - started
    expected = count if path == "first" or variant == BARE else 0
    if calls[0] - before != expected:
        raise RuntimeError(f"{variant}/{path}: body ran {calls[0] - before}, expected {expected}")
    return elapsed / count


def measure(factory: EventFactory, path: str, count: int, repeats: int) -> dict[str, float]:
    """Return the median per-request CPU time of every variant (ns)."""
    samples: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for repeat in range(repeats):
        shift = repeat % len(VARIANTS)
        for variant in VARIANTS[shift:] + VARIANTS[:shift]:
            samples[variant].append(time_once(variant, factory, path, count))
    return {variant: statistics.median(values) for variant, values in samples.items()}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a Markdown table of overheads and ratios."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_api_gateway")
    parser.add_argument("-n", "--iterations", type=int, default=2000, help="small-event loop")
    parser.add_argument("--large-iterations", type=int, default=60, help="large-event loop")
    parser.add_argument("-r", "--repeats", type=int, default=7, help="loops per variant")
    parser.add_argument("--quick", action="store_true", help="200 / 8 requests, 3 repeats")
    args = parser.parse_args(argv)
    if args.quick:
        args.iterations, args.large_iterations, args.repeats = 200, 8, 3
    for name in ("IDEMPOTENCY_DISABLED", "POWERTOOLS_IDEMPOTENCY_DISABLED"):
        os.environ.pop(name, None)
    os.environ.setdefault("AWS_LAMBDA_FUNCTION_NAME", "bench-orders")
    logging.getLogger("idempotent_lambda").setLevel(logging.WARNING)

    print(f"Python {sys.version.split()[0]}; median of {args.repeats} loops; CPU time per request")
    print()
    print(
        "| event | path | bare µs | Powertools µs | Powertools+valid. µs "
        "| ours (header) µs | ours (body key) µs | ratio header/PT | ratio body-key/PT "
        "| ratio header/PT+valid. |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for factory in event_factories():
        count = args.iterations if factory.name == "small" else args.large_iterations
        size_kb = factory.size_bytes() / 1024
        for path in PATHS:
            median = measure(factory, path, count, args.repeats)
            over = {v: (median[v] - median[BARE]) / 1000 for v in VARIANTS}
            print(
                f"| {factory.name} ({size_kb:.0f} KB) | {path} | {median[BARE] / 1000:.1f} "
                f"| {over[PT]:.1f} | {over[PT_VALIDATION]:.1f} | {over[OURS_HEADER]:.1f} "
                f"| {over[OURS_BODY_KEY]:.1f} | {over[OURS_HEADER] / over[PT]:.2f} "
                f"| {over[OURS_BODY_KEY] / over[PT]:.2f} "
                f"| {over[OURS_HEADER] / over[PT_VALIDATION]:.2f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
