"""One Lambda Managed Instances worker process: memory and import + init, against Powertools.

Managed Instances run Python as one process per concurrent request, so every process pays the
library's import, its module-level set-up and its memory. Each run starts a fresh interpreter
that executes a handler module's top level (imports, a DynamoDB store on a table, a config, the
decorated handler), timing it, then reads its own resident set size (``VmRSS``) and the size of
the interpreter before the module ran. ``ours+client`` also builds the store's boto3 client, as
the first request does (Powertools builds its client in the store's constructor). Runs
alternate between the variants; the first of each is a discarded warm-up, the median of the
rest is reported, with the ratios to Powertools.

Run: ``python -m benchmarks.managed_instances --runs 9``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

OURS = """
from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent
store = DynamoDBPersistenceLayer(table_name="IdempotencyTable")
config = IdempotencyConfig(event_key_jmespath="order_id")
@idempotent(persistence_store=store, config=config)
def handler(event, context):
    return {"ok": True}
"""
#: After the first request: our store builds its boto3 client lazily, Powertools' in __init__.
OURS_CLIENT = OURS + "store._get_client()\n"
POWERTOOLS = OURS.replace(
    "from idempotent_lambda import",
    "from aws_lambda_powertools.utilities.idempotency import",
)

CHILD = """
import time, sys
def rss_kb():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
before = rss_kb()
started = time.perf_counter()
exec(compile(sys.argv[1], "handler", "exec"), {"__name__": "handler"})
elapsed = time.perf_counter() - started
print(f'{{"init_ms": {elapsed * 1000:.2f}, "rss_kb": {rss_kb()}, "base_kb": {before}}}')
"""


def measure(source: str) -> dict[str, float]:
    env = dict(os.environ, AWS_DEFAULT_REGION="us-east-1", AWS_LAMBDA_FUNCTION_NAME="bench")
    out = subprocess.run(
        [sys.executable, "-c", CHILD, source],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=120,
    )
    result: dict[str, float] = json.loads(out.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    runs = parser.parse_args().runs
    variants = {"ours": OURS, "ours+client": OURS_CLIENT, "powertools": POWERTOOLS}
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for run in range(runs + 1):
        for name, source in variants.items():
            sample = measure(source)
            if run:  # the first is a warm-up (bytecode and page caches)
                samples[name].append(sample)
    medians = {
        name: {field: statistics.median(s[field] for s in rows) for field in rows[0]}
        for name, rows in samples.items()
    }
    print(f"{'':<11} {'import+init ms':>15} {'RSS MB':>8} {'added MB':>9}")
    for name, m in medians.items():
        added = (m["rss_kb"] - m["base_kb"]) / 1024
        print(f"{name:<11} {m['init_ms']:>15.1f} {m['rss_kb'] / 1024:>8.1f} {added:>9.1f}")
    theirs = medians["powertools"]
    for name in ("ours", "ours+client"):
        ours = medians[name]
        added = (ours["rss_kb"] - ours["base_kb"]) / (theirs["rss_kb"] - theirs["base_kb"])
        print(
            f"{name}/Powertools: import+init {ours['init_ms'] / theirs['init_ms']:.2f}x, "
            f"RSS {ours['rss_kb'] / theirs['rss_kb']:.2f}x, added {added:.2f}x"
        )


if __name__ == "__main__":
    main()
