"""Profile one CPU-suite cell: ``python -m benchmarks.profile --event small --path first``.

Runs one variant's decorated handler over the scenario's events under pyinstrument when it is
installed (a sampling profiler: low overhead, call tree), else under cProfile (ranked by own
time), and prints the profile.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats

from benchmarks import cpu
from benchmarks.events import event_factories

_VARIANTS = {"ours": cpu.OURS, "ours-native": cpu.OURS_NATIVE, "powertools": cpu.POWERTOOLS}


def main(argv: list[str] | None = None) -> int:
    """Profile the chosen cell and print the result."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__)
    parser.add_argument("--event", choices=("small", "large"), default="small")
    parser.add_argument("--path", choices=cpu.PATHS, default="first")
    parser.add_argument("--validation", action="store_true", help="turn payload validation on")
    parser.add_argument("--variant", choices=sorted(_VARIANTS), default="ours")
    parser.add_argument("-n", "--iterations", type=int, help="calls (default 5000 / 100)")
    parser.add_argument(
        "--cprofile", action="store_true", help="use cProfile even if pyinstrument is installed"
    )
    args = parser.parse_args(argv)
    factory = {f.name: f for f in event_factories()}[args.event]
    iterations = args.iterations or (5000 if args.event == "small" else 100)
    scenario = cpu.Scenario(factory, args.validation, args.path, iterations)
    warmup, events = cpu._events_for(scenario)
    body, _ = cpu._make_body()
    handler = cpu._decorate(_VARIANTS[args.variant], scenario, body)
    context = cpu.LambdaContext()
    handler(warmup, context)
    handler(warmup, context)

    def loop() -> None:
        for event in events:
            handler(event, context)

    try:
        if args.cprofile:
            raise ImportError
        from pyinstrument import Profiler
    except ImportError:
        profiler = cProfile.Profile()
        profiler.runcall(loop)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        return 0
    sampler = Profiler(interval=0.0001)
    sampler.start()
    loop()
    sampler.stop()
    print(sampler.output_text(unicode=True, color=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
