"""Run the simulator from a shell: one seed, the sweep, or a soak.

    python -m tests.simulation --seed 29            # one seed: its shrunk history if it fails
    python -m tests.simulation --sweep              # the budgeted sweep `make test` runs
    python -m tests.simulation --soak --seeds 2000  # N seeds past the sweep's
    python -m tests.simulation --soak --minutes 30  # or for T minutes

The exit status is 1 when any seed broke the contract.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

from tests.simulation.runner import SWEEP_SEEDS, Result, report, rerun_command, run_seed, shrink


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.simulation")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--seed", type=int, help="run one seed")
    mode.add_argument("--sweep", action="store_true", help="run the budgeted sweep's seeds")
    mode.add_argument("--soak", action="store_true", help="run seeds past the sweep's")
    parser.add_argument("--seeds", type=int, default=0, help="soak: how many seeds")
    parser.add_argument("--minutes", type=float, default=0, help="soak: for how long")
    parser.add_argument("--first", type=int, default=101, help="soak: first seed")
    parser.add_argument(
        "--json", action="store_true", help="print only {seed: [invariants]} of the failures"
    )
    parser.add_argument(
        "--stop-beyond",
        metavar="JSON",
        help="stop at the first failure not in this {seed: [invariants]} (a mutant is caught)",
    )
    args = parser.parse_args(argv)
    expected = os.environ.get("SIMULATION_EXPECT_PACKAGE")  # a mutant's copy (mutants.py)
    if expected:
        import idempotent_lambda

        assert idempotent_lambda.__file__.startswith(expected), idempotent_lambda.__file__
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        os.environ.setdefault(name, value)
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    from idempotent_lambda.testing import local_dynamodb

    if args.seed is not None:
        seeds: range | list[int] = range(args.seed, args.seed + 1)
    elif args.sweep:
        seeds = SWEEP_SEEDS
    else:
        count = args.seeds or (10**9 if args.minutes else 1000)
        seeds = range(args.first, args.first + count)
    deadline = time.monotonic() + args.minutes * 60 if args.minutes else None
    started = time.monotonic()
    ran = failed = 0
    failures: dict[int, list[str]] = {}
    logging.disable(logging.CRITICAL)  # the histories tell what happened; logs only repeat it
    with local_dynamodb() as endpoint:
        for seed in seeds:
            if deadline is not None and time.monotonic() > deadline:
                break
            result: Result = run_seed(seed, endpoint)
            ran += 1
            if not result.failed:
                continue
            failed += 1
            failures[seed] = sorted({v.invariant for v in result.violations})
            if args.stop_beyond is not None:
                known = json.loads(args.stop_beyond).get(str(seed), [])
                if set(failures[seed]) - set(known):
                    break
            if not args.json:
                print(report(shrink(result, endpoint), rerun_command(seed)), flush=True)
    if args.json:
        print(json.dumps({"failures": failures}))
        return 0
    minutes = (time.monotonic() - started) / 60
    print(
        f"simulation: {ran} histories, {failed} broke the contract, "
        f"{ran / max(minutes, 1e-9):.0f} histories per minute"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
