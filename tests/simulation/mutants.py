"""Deliberate faults the budgeted sweep must catch (issue 41, "Mutants"): `make simulate-mutants`.

Each mutant is one textual change of one module of the package. The runner copies the package
to a temporary folder, applies the change there (never to the checkout), and runs the sweep in
a child process whose ``PYTHONPATH`` puts the copy first. A mutant is caught when the sweep
finds a seed and an invariant that the unchanged copy does not break (the baseline, run the
same way first, holds the open defects' seeds). Add a mutant here when a review finds a defect
the sweep missed: the list is the sweep's own regression suite.

    python -m tests.simulation.mutants            # every mutant
    python -m tests.simulation.mutants owner-fence request-bound-zero
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Mutant:
    """One deliberate fault: in ``path`` (under the package), ``old`` becomes ``new``; and so
    for each of ``more`` (path, old, new) when one fault takes two edits."""

    name: str
    what: str
    path: str
    old: str
    new: str
    more: tuple[tuple[str, str, str], ...] = ()


MUTANTS = (
    Mutant(
        "owner-fence",
        "the completion (and release) written without its owner condition",
        "persistence/dynamodb/_schema.py",
        'condition = "#status = :in_progress AND #owner = :owner"',
        'condition = "#status = :in_progress AND (#owner = :owner OR attribute_exists(#owner))"',
    ),
    Mutant(
        "request-bound-zero",
        "the request bound counted as zero: completions grouped until the tolerance",
        "persistence/_aws.py",
        "return int((count * (connect + read) + backoff_s) * 1000)",
        "return 0",
    ),
    Mutant(
        "done-without-completion",
        "a batch record whose body failed reported done, with no completion written",
        "adapters/_batch_lanes.py",
        "            if completion is None:\n"
        "                progress.finish(index, flow.failure())",
        "            if completion is None:\n                progress.finish(index, None)",
    ),
    Mutant(
        "lease-wrong-clock",
        "the lease read from the wall clock instead of the store's clock",
        "_identity.py",
        "lease_end_ms=now_ms + lease_ms,",
        'lease_end_ms=__import__("time").time_ns() // 1_000_000 + lease_ms,',
    ),
    Mutant(
        "replay-other-key",
        "a batch's read serves every record the first key's record, and the engine's check "
        "that a record read is the invocation's own is gone",
        "adapters/_batch.py",
        "stored = [None if key is None else known.get(key) for key in keys]",
        "stored = [None if key is None else known.get(keys[0]) for key in keys]",
        (("_engine.py", "and known.idempotency_key == inv.key\n", "\n"),),
    ),
    Mutant(
        "key-digest-dropped",
        "every payload gets one key: a replay answers with another key's result",
        "_identity.py",
        'key=f"{prefix}#{digest(config, material)}",',
        'key=f"{prefix}#0",',
    ),
    Mutant(
        "kafka-partition-unchained",
        "a Kafka partition's records are not one lane: they run out of order",
        "adapters/kafka.py",
        "return None if position is None else position[:2]",
        "return position",
    ),
    Mutant(
        "lane-reversed",
        "the records of an ordered lane run last first",
        "adapters/_batch_lanes.py",
        "lanes.setdefault(root(index), []).append(index)",
        "lanes.setdefault(root(index), []).insert(0, index)",
    ),
    Mutant(
        "takeover-early",
        "a claim takes over a lease 30 s before it ends (the tolerance turned around)",
        "_claim.py",
        "lease_cutoff_ms=now - CLOCK_SKEW_TOLERANCE_MS,",
        "lease_cutoff_ms=now + 30_000,",
    ),
    Mutant(
        "suspension-releases",
        "a durable execution's claim released when its invocation suspends (a wait, a step's "
        "retry), so another execution of the payload runs it meanwhile",
        "_durable_context.py",
        "    return not ends_execution(error, context)",
        "    return is_suspension(error)",
    ),
    Mutant(
        "scope-not-checkpointed",
        "a durable step's scope drawn again in every invocation instead of checkpointed: a "
        "replay of an unfinished step gets another key and runs its side effect again",
        "durable.py",
        "scope: str = context.step(_draw_scope, name=SCOPE_STEP_NAME)",
        "scope: str = _draw_scope(None)",
    ),
    Mutant(
        "durable-owner-per-invocation",
        "a durable handler's claim owned by the invocation, not the execution: a replay meets "
        "its own execution's claim as another's",
        "_engine.py",
        "            owner=durable.owner,\n",
        "",
    ),
    Mutant(
        "memory-claim-unconditional",
        "the in-memory store's claim wins over a live record",
        "persistence/in_memory.py",
        "if not claim_allowed(existing, now_ms=now_ms, lease_cutoff_ms=lease_cutoff_ms):",
        "if False:",
    ),
    Mutant(
        "redis-owner-fence",
        "the Redis store completes and releases a record whoever holds it (both layouts)",
        "persistence/redis/_commands.py",
        "if ARGV[4] == '1' then owned = state[2] == ARGV[5] else owned = not state[2] end",
        "local owned = true",
        (
            (
                "persistence/redis/_commands.py",
                "  if owner ~= ARGV[5] then return 0 end",
                "  owner = ARGV[5]",
            ),
        ),
    ),
    Mutant(
        "publisher-skips-inserts",
        "the publisher skips the new items it should publish",
        "outbox/_publisher.py",
        'if record.event_name == "REMOVE":',
        'if record.event_name != "REMOVE":',
    ),
    Mutant(
        "publisher-ignores-refusals",
        "the publisher takes every entry of a PutEvents as accepted, FailedEntryCount or not",
        "outbox/_publisher.py",
        'yield event, result.get("ErrorCode") or (None if result.get("EventId") else "NoId")',
        "yield event, None",
    ),
    Mutant(
        "offload-object-shared",
        "an offloaded result's S3 object named by its key alone, not its owner: a completion "
        "whose lease was taken over overwrites the newer owner's object",
        "persistence/dynamodb/_s3.py",
        "/{owner or 'unowned'}\"",
        '/shared"',
    ),
    Mutant(
        "mark-unconditional",
        "the published mark's condition dropped: a second publisher of one event marks it again "
        "(and a mark would re-create an item TTL deleted)",
        "persistence/dynamodb/_outbox.py",
        '"attribute_exists(#key) AND attribute_not_exists(#published)"',
        '"attribute_exists(#key) OR attribute_not_exists(#key)"',
    ),
)
#: Faults the sweep does not catch, and why: the next workloads to write.
NOT_CAUGHT = (
    Mutant(
        "memory-owner-fence",
        "the in-memory store completes and releases a record whoever owns it: equivalent under "
        "the model, since no write of an in-process store outlives its writer (Lambda ends a "
        "paused process at its deadline, before a takeover may start), so a stale owner never "
        "writes; the Redis store's fence, whose commands do outlive their writer on the wire, "
        "is caught (redis-owner-fence)",
        "persistence/in_memory.py",
        "entry[0].status is Status.IN_PROGRESS and entry[0].owner == owner",
        "entry[0].status is Status.IN_PROGRESS",
    ),
)


def sweep_in_copy(
    mutant: Mutant | None, baseline: dict[str, list[str]] | None = None
) -> dict[str, list[str]]:
    """Run the sweep on a copy of the package with ``mutant`` applied; return its failures
    (up to the first one the ``baseline`` does not have)."""
    with tempfile.TemporaryDirectory(prefix="sim-mutant-") as folder:
        copy = Path(folder) / "idempotent_lambda"
        shutil.copytree(ROOT / "idempotent_lambda", copy)
        if mutant is not None:
            for path, old, new in ((mutant.path, mutant.old, mutant.new), *mutant.more):
                target = copy / path
                text = target.read_text()
                if text.count(old) != 1:
                    raise SystemExit(f"mutant {mutant.name}: its text is not once in {target}")
                target.write_text(text.replace(old, new))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([folder, str(ROOT)])}
        env["SIMULATION_EXPECT_PACKAGE"] = str(copy)
        done = subprocess.run(
            [sys.executable, "-m", "tests.simulation", "--sweep", "--json"]
            + ([] if baseline is None else ["--stop-beyond", json.dumps(baseline)]),
            cwd=folder,  # "" on sys.path is the copy, not the checkout
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if not lines:
            raise SystemExit(
                f"the sweep did not finish:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
            )
        failures: dict[str, list[str]] = json.loads(lines[-1])["failures"]
        return failures


def caught(baseline: dict[str, list[str]], mutated: dict[str, list[str]]) -> list[str]:
    """Return the seed/invariant pairs the mutant breaks and the baseline does not."""
    return sorted(
        f"seed {seed}: {invariant}"
        for seed, invariants in mutated.items()
        for invariant in invariants
        if invariant not in baseline.get(seed, [])
    )


def main(argv: list[str]) -> int:
    chosen = [m for m in (*MUTANTS, *NOT_CAUGHT) if m.name in argv] if argv else list(MUTANTS)
    started = time.monotonic()
    baseline = sweep_in_copy(None)
    print(f"baseline: {len(baseline)} seed(s) fail (open defects): {sorted(baseline)}", flush=True)
    missed = []
    for mutant in chosen:
        found = caught(baseline, sweep_in_copy(mutant, baseline))
        verdict = f"CAUGHT ({len(found)}: {', '.join(found[:3])})" if found else "MISSED"
        print(f"{mutant.name:<30} {verdict}\n    {mutant.what}", flush=True)
        if not found:
            missed.append(mutant.name)
    minutes = (time.monotonic() - started) / 60
    print(f"mutants caught: {len(chosen) - len(missed)} of {len(chosen)} ({minutes:.1f} min)")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
