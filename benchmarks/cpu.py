"""Per-invocation CPU overhead of ``@idempotent``: ours vs Powertools, on in-memory stores.

For each scenario (event size x validation on/off x path) every variant — the bare handler,
Powertools, ours with the default config (Powertools' format, md5) and ours in the native
format (sha256) — is timed
over the same events. A measurement is the CPU time (``time.process_time_ns``) of
``iterations`` calls divided by ``iterations``, taken in ``CHUNKS`` turns during which the
variants take slices of the events in rotating order, so that load from other processes hits
them alike. Each variant is measured ``repeats`` times and the median is kept; the overhead of a
variant is its median minus the bare handler's median.

Every repeat starts from a fresh store and a freshly decorated handler. Paths:

- ``first``: a new key every call (claim, run, complete);
- ``replay``: the same key every call, completed record in the store (one failed claim);
- ``cached``: as replay with ``use_local_cache=True`` (no store access at all).

Each timed loop is checked: the body must have run on every call of the first path and never on
the replay paths, else the run aborts (a benchmark that measures the wrong thing is worse than
none).
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.events import KEY_EXPRESSION, VALIDATION_EXPRESSION, EventFactory

Handler = Callable[[Any, Any], Any]
PATHS = ("first", "replay", "cached")
BARE, POWERTOOLS, OURS, OURS_NATIVE = "bare", "powertools", "ours (default)", "ours (native)"
VARIANTS = (BARE, POWERTOOLS, OURS, OURS_NATIVE)
#: Turns per repeat: every variant runs a slice of the events in turn, ``CHUNKS`` times.
CHUNKS = 10
_RESPONSE = {
    "statusCode": 201,
    "headers": {"Content-Type": "application/json"},
    "body": '{"status":"accepted"}',
}


class LambdaContext:
    """The parts of the Lambda context both libraries read, with a fixed remaining time."""

    function_name = "bench-orders"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:bench-orders"
    memory_limit_in_mb = 1024
    aws_request_id = "c6af9ac6-7b61-11e6-9a41-93e8deadbeef"
    log_group_name = "/aws/lambda/bench-orders"
    log_stream_name = "2025/04/09/[$LATEST]0123456789abcdef"

    def get_remaining_time_in_millis(self) -> int:
        """Return 30 s, as if the invocation had just started."""
        return 30_000


@dataclass(frozen=True)
class Scenario:
    """One cell of the matrix."""

    event: EventFactory
    validation: bool
    path: str
    iterations: int

    @property
    def config_label(self) -> str:
        """Return a short description of the config."""
        return "key + validation" if self.validation else "key"

    def target(self) -> float | None:
        """Return the guard (ours / Powertools) this scenario is held to (issue 10).

        Every path is guarded: at most 0.5x Powertools on the small event, 0.6x on the large.
        """
        return 0.5 if self.event.name == "small" else 0.6


@dataclass
class ScenarioResult:
    """Median per-call CPU time of every variant in one scenario (nanoseconds)."""

    scenario: Scenario
    per_call_ns: dict[str, float] = field(default_factory=dict)
    samples_ns: dict[str, list[float]] = field(default_factory=dict)

    def overhead_ns(self, variant: str) -> float:
        """Return the variant's median minus the bare handler's median."""
        return self.per_call_ns[variant] - self.per_call_ns[BARE]

    def ratio(self, variant: str) -> float:
        """Return the variant's overhead over Powertools' overhead."""
        return self.overhead_ns(variant) / self.overhead_ns(POWERTOOLS)

    def spread(self, variant: str) -> float:
        """Return (max - min) / median of the variant's repeats: how noisy the cell was."""
        samples = self.samples_ns[variant]
        return (max(samples) - min(samples)) / statistics.median(samples)


def _make_body() -> tuple[Handler, list[int]]:
    calls = [0]

    def handler(event: Any, context: Any) -> Any:
        calls[0] += 1
        return _RESPONSE

    return handler, calls


def _decorate(variant: str, scenario: Scenario, handler: Handler) -> Handler:
    validation = VALIDATION_EXPRESSION if scenario.validation else ""
    cached = scenario.path == "cached"
    if variant == BARE:
        return handler
    if variant == POWERTOOLS:
        from aws_lambda_powertools.utilities.idempotency import (
            IdempotencyConfig as PowertoolsConfig,
        )
        from aws_lambda_powertools.utilities.idempotency import idempotent as pt_idempotent

        from benchmarks.powertools_memory import PowertoolsInMemoryPersistenceLayer

        pt_config = PowertoolsConfig(
            event_key_jmespath=KEY_EXPRESSION,
            payload_validation_jmespath=validation,
            use_local_cache=cached,
            raise_on_no_idempotency_key=True,
        )
        pt_store = PowertoolsInMemoryPersistenceLayer()
        decorated: Handler = pt_idempotent(persistence_store=pt_store, config=pt_config)(handler)
        return decorated

    from idempotent_lambda import IdempotencyConfig, InMemoryPersistenceLayer, idempotent

    config = IdempotencyConfig(
        event_key_jmespath=KEY_EXPRESSION,
        payload_validation_jmespath=validation,
        use_local_cache=cached,
        raise_on_no_idempotency_key=True,
        record_format="native" if variant == OURS_NATIVE else "powertools",
    )
    store = InMemoryPersistenceLayer()
    return idempotent(persistence_store=store, config=config)(handler)


def _events_for(scenario: Scenario) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Return the warm-up event and the events of one timed loop."""
    factory = scenario.event
    if scenario.path == "first":
        warmup = factory.make("ord-warmup")
        return warmup, [factory.make(f"ord-{i:06d}") for i in range(scenario.iterations)]
    event = factory.make("ord-replayed")
    return event, [event] * scenario.iterations


class _Runner:
    """One variant's decorated handler for one repeat, timed chunk by chunk."""

    def __init__(self, variant: str, scenario: Scenario, warmup: dict[str, Any]) -> None:
        self.variant = variant
        self.scenario = scenario
        body, self._calls = _make_body()
        self._handler = _decorate(variant, scenario, body)
        self._context = LambdaContext()
        first = self._handler(warmup, self._context)  # stores the record (replay paths)
        if self._handler(warmup, self._context) != first:
            raise RuntimeError(f"{variant}: a replay returned a different response")
        self._ran_before = self._calls[0]
        self.elapsed_ns = 0
        self.count = 0

    def time(self, events: list[dict[str, Any]]) -> None:
        """Call the handler on ``events`` and add the CPU time it took, its garbage included.

        The collection at the end is timed: garbage the calls left in reference cycles (a
        JMESPath interpreter holding a parsed body, say) is this variant's cost. Left to the
        collector's own schedule it would be paid by whichever variant runs next.
        """
        handler, context = self._handler, self._context
        clock = time.process_time_ns
        started = clock()
        for event in events:
            handler(event, context)
        gc.collect()
        self.elapsed_ns += clock() - started
        self.count += len(events)

    def per_call_ns(self) -> float:
        """Return the mean CPU time per call, after checking the body ran as the path implies."""
        ran = self._calls[0] - self._ran_before
        expected = self.count if self.scenario.path == "first" or self.variant == BARE else 0
        if ran != expected:
            raise RuntimeError(
                f"{self.variant} / {self.scenario.path}: body ran {ran} times in the timed "
                f"loops, expected {expected}"
            )
        return self.elapsed_ns / self.count


def run_scenario(scenario: Scenario, repeats: int, chunks: int = CHUNKS) -> ScenarioResult:
    """Measure every variant on one scenario.

    Each repeat builds fresh handlers, then times the variants in turns over ``chunks`` slices
    of the events (rotating who goes first), so a burst of load on a shared machine lands on
    every variant alike instead of on whichever happened to run at that moment.
    """
    warmup, events = _events_for(scenario)
    size = max(1, len(events) // chunks)
    slices = [events[i : i + size] for i in range(0, len(events), size)]
    result = ScenarioResult(scenario, samples_ns={variant: [] for variant in VARIANTS})
    for repeat in range(repeats):
        runners = {variant: _Runner(variant, scenario, warmup) for variant in VARIANTS}
        gc.collect()
        gc.freeze()  # the harness's objects (events, runners) are nobody's cost: not traversed
        try:
            for index, chunk in enumerate(slices):
                shift = (repeat + index) % len(VARIANTS)
                for variant in VARIANTS[shift:] + VARIANTS[:shift]:
                    runners[variant].time(chunk)
        finally:
            gc.unfreeze()
        for variant, runner in runners.items():
            result.samples_ns[variant].append(runner.per_call_ns())
    result.per_call_ns = {v: statistics.median(s) for v, s in result.samples_ns.items()}
    return result


def scenarios(
    factories: Iterable[EventFactory], *, iterations: int, large_iterations: int
) -> list[Scenario]:
    """Return the scenario matrix: event size x config x path."""
    return [
        Scenario(
            factory,
            validation,
            path,
            iterations if factory.name == "small" else large_iterations,
        )
        for factory in factories
        for validation in (False, True)
        for path in PATHS
    ]


def run(
    factories: Iterable[EventFactory],
    *,
    iterations: int,
    large_iterations: int,
    repeats: int,
    progress: Callable[[str], None] = lambda _: None,
) -> list[ScenarioResult]:
    """Run the whole CPU suite."""
    results = []
    for scenario in scenarios(factories, iterations=iterations, large_iterations=large_iterations):
        started = time.perf_counter()
        result = run_scenario(scenario, repeats)
        progress(
            f"cpu: {scenario.event.name:5} {scenario.config_label:16} {scenario.path:6} "
            f"ratio {result.ratio(OURS):.3f} ({time.perf_counter() - started:.1f}s)"
        )
        results.append(result)
    return results
