"""Environment switches, read at call time so tests and operators can flip them live."""

from __future__ import annotations

import os

_TRUTHY = frozenset({"1", "true", "yes", "on", "y", "t"})
DISABLE_VARIABLES = ("IDEMPOTENCY_DISABLED", "POWERTOOLS_IDEMPOTENCY_DISABLED")


def idempotency_disabled() -> bool:
    """Tell whether idempotency is switched off by environment variable."""
    return any(os.environ.get(name, "").strip().lower() in _TRUTHY for name in DISABLE_VARIABLES)
