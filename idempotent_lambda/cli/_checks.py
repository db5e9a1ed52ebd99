"""A doctor finding: what was checked, how it stands, and what to do about it."""

from __future__ import annotations

from dataclasses import dataclass

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass(frozen=True)
class Check:
    """One finding: what was checked, how it stands, and what to do about it."""

    check: str
    status: str
    detail: str
    fix: str | None = None
