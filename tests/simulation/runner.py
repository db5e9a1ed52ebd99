"""Run seeds, shrink failures, report: the sweep, one seed, or a soak.

A failing program is shrunk by deleting steps, faults and nested steps and by halving times,
keeping each change that still breaks the same invariant; the report prints the shrunk
program, its history and the command that reruns the seed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from tests.simulation.checker import Violation, check
from tests.simulation.history import History
from tests.simulation.program import (
    DURABLE_FIRST,
    MEMORY_FIRST,
    OFFLOAD_FIRST,
    REDIS_FIRST,
    SWEEPER_FIRST,
    Call,
    Consume,
    DCall,
    Fault,
    Poll,
    Program,
    Publish,
    Step,
    Sweep,
    generate,
)
from tests.simulation.world import World

#: The budgeted sweep `make test` and `make simulate` run: fixed seeds, fixed verdict.
#: Seeds 1-100 draw the batch and outbox workloads, the next 40 the durable one, the next 100
#: the batch or durable workload on the in-memory store, the next 60 on Redis, the next 20 the
#: outbox workload with the sweeper, the last 20 the batch workload with its results in S3.
SWEEP_SEEDS = [
    *range(1, 101),
    *range(DURABLE_FIRST, DURABLE_FIRST + 40),
    *range(MEMORY_FIRST, MEMORY_FIRST + 100),
    *range(REDIS_FIRST, REDIS_FIRST + 60),
    *range(SWEEPER_FIRST, SWEEPER_FIRST + 20),
    *range(OFFLOAD_FIRST + 50, OFFLOAD_FIRST + 70),
]


@dataclass
class Result:
    """A run's program, history and violations."""

    program: Program
    history: History
    violations: list[Violation]

    @property
    def failed(self) -> bool:
        return bool(self.violations)


def run(program: Program, endpoint: str) -> Result:
    """Run ``program`` on a fresh table and check its history."""
    history = World(program, endpoint).run()
    return Result(program, history, check(history))


def run_seed(seed: int, endpoint: str, workload: str | None = None) -> Result:
    """Generate and run the program of ``seed``."""
    return run(generate(seed, workload), endpoint)


def shrink(result: Result, endpoint: str, budget: int = 150) -> Result:
    """Reduce a failing run to a smaller program that breaks the same invariant."""
    target = {v.invariant for v in result.violations}
    best = result
    tries = 0

    def still_fails(program: Program) -> Result | None:
        nonlocal tries
        tries += 1
        candidate = run(program, endpoint)
        if {v.invariant for v in candidate.violations} & target:
            return candidate
        return None

    improved = True
    while improved and tries < budget:
        improved = False
        for steps in _smaller(best.program.steps):
            if tries >= budget:
                break
            candidate = still_fails(best.program.with_steps(steps))
            if candidate is not None:
                best = candidate
                improved = True
                break
    return best


def _smaller(steps: tuple[Step, ...]) -> Iterator[tuple[Step, ...]]:
    """Yield programs one edit smaller than ``steps``: a step gone, a fault gone or simpler."""
    for index in range(len(steps)):
        yield steps[:index] + steps[index + 1 :]
    for index, step in enumerate(steps):
        for simpler in _simpler_step(step):
            yield (*steps[:index], simpler, *steps[index + 1 :])


def _simpler_step(step: Step) -> Iterator[Step]:
    if isinstance(step, (Poll, Call, DCall, Publish, Sweep, Consume)):
        faults = step.faults
        for index in range(len(faults)):
            yield replace(step, faults=faults[:index] + faults[index + 1 :])  # type: ignore[arg-type]
        for index, fault in enumerate(faults):
            for simpler in _simpler_fault(fault):
                changed = (*faults[:index], simpler, *faults[index + 1 :])
                yield replace(step, faults=changed)  # type: ignore[arg-type]
        if isinstance(step, (Poll, Call, DCall)) and step.body_ms:
            yield replace(step, body_ms=0)
        if isinstance(step, Poll) and step.crash_body is not None:
            yield replace(step, crash_body=None)
        if isinstance(step, Poll) and step.fail_body is not None:
            yield replace(step, fail_body=None)
        if isinstance(step, DCall) and step.wait:
            yield replace(step, wait=False)
        if isinstance(step, (Call, DCall)) and step.fail_body:
            yield replace(step, fail_body=False)
        if isinstance(step, (Call, DCall)) and step.crash_body:
            yield replace(step, crash_body=False)
        if isinstance(step, (Poll, Call, DCall, Publish, Sweep, Consume)) and step.env:
            yield replace(step, env=0)
    elif step.ms > 1:
        yield replace(step, ms=step.ms // 2)


def _simpler_fault(fault: Fault) -> Iterator[Fault]:
    for steps in _smaller(fault.during):
        yield replace(fault, during=steps)


def report(result: Result, rerun: str) -> str:
    """Return the text a failure prints: violations, program, history, the command."""
    return "\n".join(
        [
            f"simulation seed {result.program.seed} broke the contract:",
            *(f"  {result.history.readable(str(v))}" for v in result.violations),
            "program (shrunk):",
            result.program.render(),
            "history:",
            result.history.render(),
            f"rerun: {rerun}",
        ]
    )


def rerun_command(seed: int) -> str:
    """Return the command that reruns ``seed`` alone."""
    return f"python -m tests.simulation --seed {seed}"


def sweep(
    seeds: range | list[int],
    endpoint: str,
    *,
    on_result: Callable[[Result], None] | None = None,
    deadline: float | None = None,
) -> list[Result]:
    """Run ``seeds``; return the failing results (shrunk)."""
    failures = []
    for seed in seeds:
        if deadline is not None and time.monotonic() > deadline:
            break
        result = run_seed(seed, endpoint)
        if on_result is not None:
            on_result(result)
        if result.failed:
            failures.append(shrink(result, endpoint))
    return failures
