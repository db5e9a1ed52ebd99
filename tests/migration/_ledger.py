"""The side effects of tests/migration/_orders_app.py, shared by every copy of the app."""

from __future__ import annotations

LEDGER: list[tuple[str, str]] = []
"""One entry per run of a side effect: ``(kind, id)``. A double execution shows up twice."""
