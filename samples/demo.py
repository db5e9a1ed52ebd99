"""Run the sample order service locally, on an embedded DynamoDB-compatible server, and narrate it.

    python -m samples.demo                          # the scenario, on an embedded moto server
    python -m samples.demo --endpoint-url URL       # the same on DynamoDB Local, or an account
        [--s3-endpoint-url URL]                     # ... with the bucket on that S3 endpoint
        [--events-endpoint-url URL]                 # ... the outbox's bus and queue there
    python -m samples.demo --handler samples.app.create_order.handler \\
        --event samples/events/create_order.json [--times 2]   # one handler, one event

The tables (and, on the embedded server or with --s3-endpoint-url, the large-results bucket) are
created from template.yaml's definitions and the handlers get the environment the template gives
them; without an S3 endpoint LARGE_RESULTS_BUCKET is left unset (no offload). The outbox's event
bus, rule and queue are created on the embedded server (which serves EventBridge and SQS too) or
on --events-endpoint-url; without one the outbox step is skipped. The scenario exits
non-zero if any expectation fails; the single-event mode prints each response (and the library's
decisions) and exits non-zero if the handler raised.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
from pathlib import Path

from samples.local_app import start_app
from samples.local_lambda import invoke, load_handler
from samples.local_server import dynamodb_endpoint
from samples.scenario import run_scenario
from samples.watchers import Transcript


def run_demo(
    endpoint_url: str, s3_endpoint_url: str | None = None, events_endpoint_url: str | None = None
) -> int:
    """Play the scenario against ``endpoint_url``; return the number of failed checks."""
    t = Transcript()
    with start_app(endpoint_url, s3_endpoint_url, events_endpoint_url) as app:
        print(f"DynamoDB endpoint {endpoint_url}; tables from template.yaml:")
        for logical_id, name in app.tables.items():
            print(f"   {logical_id:<20} -> {name}")
        if s3_endpoint_url is None:
            print("no S3 endpoint: LARGE_RESULTS_BUCKET unset, large results are not offloaded")
        else:
            print(f"S3 endpoint {s3_endpoint_url}; buckets from template.yaml:")
            for logical_id, name in app.buckets.items():
                print(f"   {logical_id:<20} -> {name}")
        if app.outbox is None:
            print("no EventBridge/SQS endpoint: the outbox's events are not published")
        else:
            print(f"EventBridge and SQS endpoint {events_endpoint_url}: OrderEventsBus, ")
            print("   OrderCreatedRule -> OrderEventsQueue, from template.yaml")
        run_scenario(app, t)
    if t.failures:
        print(f"\n{len(t.failures)} of {t.checks} checks FAILED:")
        for failure in t.failures:
            print(f"   - {failure}")
    else:
        print(f"\nall {t.checks} checks passed")
    return len(t.failures)


def run_single(
    endpoint_url: str,
    s3_endpoint_url: str | None,
    events_endpoint_url: str | None,
    *,
    handler_path: str,
    event_path: Path,
    times: int,
) -> int:
    """Invoke one handler with one event file ``times`` times; print what comes back."""
    event = json.loads(event_path.read_text(encoding="utf-8"))
    times = max(times, 1)
    with start_app(endpoint_url, s3_endpoint_url, events_endpoint_url) as app:
        handler = load_handler(handler_path)
        function_name = handler_path.rsplit(".", 2)[-2]
        for attempt in range(1, times + 1):
            seen = len(app.decisions.decisions)
            try:
                result = invoke(handler, event, function_name=function_name)
            except Exception as exc:
                logging.getLogger(__name__).exception("the handler raised")
                print(f"invocation {attempt}: raised {type(exc).__name__}: {exc}")
                return 1
            print(f"invocation {attempt}: {json.dumps(result, indent=2, default=str)}")
            for decision in app.decisions.decisions[seen:]:
                print(f"   decision: {decision['outcome']} key={decision.get('key')}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, start or reuse a server, run the scenario or the single event."""
    parser = argparse.ArgumentParser(
        prog="python -m samples.demo", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--endpoint-url", help="use this DynamoDB endpoint instead of moto")
    parser.add_argument(
        "--s3-endpoint-url",
        help="create the large-results bucket on this S3 endpoint "
        "(default: the embedded server; none with --endpoint-url)",
    )
    parser.add_argument(
        "--events-endpoint-url",
        help="create the outbox's bus, rule and queue on this EventBridge and SQS endpoint "
        "(default: the embedded server; none with --endpoint-url)",
    )
    parser.add_argument("--handler", help="dotted path of a handler to invoke with --event")
    parser.add_argument("--event", type=Path, help="JSON event file for --handler")
    parser.add_argument("--times", type=int, default=1, help="invoke --handler this many times")
    args = parser.parse_args(argv)
    if bool(args.handler) != bool(args.event):
        parser.error("--handler and --event go together")
    logging.basicConfig(level=logging.WARNING, format="   [log] %(levelname)s %(message)s")
    # Powertools warns when an invocation flushes no metric (a request refused before any
    # decision was counted); in Lambda that goes to the logs, here it would interrupt the story.
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    for handler in logging.getLogger().handlers:  # decisions are INFO: collected, not printed
        handler.setLevel(logging.WARNING)
    with dynamodb_endpoint(args.endpoint_url) as endpoint:
        # moto serves S3 on the same endpoint; another DynamoDB endpoint needs its own S3 one.
        s3_endpoint = args.s3_endpoint_url or (endpoint if args.endpoint_url is None else None)
        events_endpoint = args.events_endpoint_url or (
            endpoint if args.endpoint_url is None else None
        )
        if args.handler:
            return run_single(
                endpoint,
                s3_endpoint,
                events_endpoint,
                handler_path=args.handler,
                event_path=args.event,
                times=args.times,
            )
        return 1 if run_demo(endpoint, s3_endpoint, events_endpoint) else 0


if __name__ == "__main__":
    sys.exit(main())
