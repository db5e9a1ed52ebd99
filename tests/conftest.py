"""Settings shared by every test layer: hypothesis profiles.

The default profile is derandomised and has no per-example deadline, so a run is reproducible
and a loaded machine cannot fail a property by being slow. ``HYPOTHESIS_PROFILE=explore`` asks
for fresh random examples (and more of them) when hunting for bugs locally.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "reproducible",
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile(
    "explore",
    derandomize=False,
    deadline=None,
    max_examples=1000,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "reproducible"))
