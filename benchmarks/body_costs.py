"""CPU cost of each step a large-body invocation pays, for docs/benchmarks.md (issue 10).

``python -m benchmarks.body_costs`` times, on the body of the large CPU-suite event: the parse
both libraries do (``json.loads``), our normalising walk and sorted dump (the two halves of
`idempotent_lambda._canonical.canonical_json`), our sha256, and Powertools' dump and md5 of a
validation payload. The steps take turns over 9 rounds of 20 calls; the median and the minimum
per call are printed as a Markdown table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections.abc import Callable

from benchmarks.events import event_factories
from idempotent_lambda._canonical import _ENCODER, _prepare


def steps(body: str) -> dict[str, Callable[[], object]]:
    """Return the timed steps, each a call on the parsed (or dumped) ``body``."""
    parsed = json.loads(body)
    walked = _prepare(parsed)
    canonical = _ENCODER.encode(walked).encode()
    powertools_text = json.dumps(parsed, sort_keys=True).encode()
    return {
        "P: `json.loads(body)` (both)": lambda: json.loads(body),
        "N: normalising walk, `_canonical._prepare` (ours)": lambda: _prepare(parsed),
        "D: sorted compact dump of the walked value (ours)": lambda: _ENCODER.encode(walked),
        "H: sha256 of the canonical text (ours)": lambda: hashlib.sha256(canonical).hexdigest(),
        "D<sub>pt</sub>: `json.dumps(sort_keys=True)` (Powertools)": lambda: json.dumps(
            parsed, sort_keys=True
        ),
        "H<sub>pt</sub>: md5 of that text (Powertools)": lambda: hashlib.md5(
            powertools_text
        ).hexdigest(),
    }


def main() -> None:
    """Print the per-step table for the large (or small) event's body."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.body_costs", description=__doc__)
    parser.add_argument("--event", choices=("small", "large"), default="large")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    factory = next(f for f in event_factories() if f.name == args.event)
    body = factory.make("order-1")["body"]
    timed = steps(body)
    samples: dict[str, list[float]] = {label: [] for label in timed}
    for _ in range(args.rounds):
        for label, step in timed.items():
            start = time.process_time_ns()
            for _ in range(args.calls):
                step()
            samples[label].append((time.process_time_ns() - start) / args.calls / 1e6)
    print(f"{args.event} body: {len(body.encode()):,} bytes")
    print()
    print("| step | median ms | min ms |")
    print("|---|---:|---:|")
    for label, values in samples.items():
        values.sort()
        print(f"| {label} | {values[len(values) // 2]:.2f} | {values[0]:.2f} |")


if __name__ == "__main__":
    main()
