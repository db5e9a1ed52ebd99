"""What happened in one simulated run, in the order it happened: the checker's only input.

Every entry carries the world's time (the `ManualClock` every environment's skewed clock reads)
and the invocation it belongs to. Owner tokens and idempotency keys are random or hashed; the
history names them by short labels (``k1``, ``k1/o2``) so a printed history reads in a minute.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Entry:
    """One thing that happened."""

    t_ms: int
    inv: str  # "inv3", "pub1", ... or "-" for the world itself
    kind: str
    text: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Write:
    """One item a store request changed (or tried to), with the item before and after."""

    key: str
    op: str  # claim, complete, release, outbox, mark, other
    owner: str | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None


class History:
    """The entries of one run, and the labels that make them readable."""

    def __init__(self, start_ms: int) -> None:
        self.start_ms = start_ms
        self.entries: list[Entry] = []
        self._labels: dict[str, str] = {}
        self._owners: dict[str, str] = {}
        self._owner_count: dict[str, int] = {}
        self._names: dict[str, str] = {}
        self.meta: dict[str, Any] = {}  # what the checker needs to know of the world

    def add(self, t_ms: int, who: str, kind: str, text: str, **data: Any) -> Entry:
        """Append an entry and return it."""
        entry = Entry(t_ms, who, kind, text, data)
        self.entries.append(entry)
        return entry

    def key_label(self, key: str) -> str:
        """Name a stored key (``key3``); `readable` shows the workload's name for it."""
        if key not in self._labels:
            self._labels[key] = f"key{len(self._labels) + 1}"
        return self._labels[key]

    def name(self, key: str, name: str) -> None:
        """Show ``key`` as ``name`` (the workload's own name for it: a message id, a key)."""
        self._names.setdefault(self.key_label(key), name)

    def readable(self, text: str) -> str:
        """Replace the labels in ``text`` by the workload's names."""
        return re.sub(r"\bkey\d+\b", lambda m: self._names.get(m.group(0), m.group(0)), text)

    def owner_label(self, key: str, owner: str | None) -> str:
        """Name an owner token by its key and the order claims were made (``k1/o2``)."""
        if owner is None:
            return "-"
        if owner not in self._owners:
            label = self.key_label(key)
            count = self._owner_count.get(label, 0) + 1
            self._owner_count[label] = count
            self._owners[owner] = f"{label}/o{count}"
        return self._owners[owner]

    def of(self, kind: str) -> list[Entry]:
        """Return the entries of ``kind``."""
        return [entry for entry in self.entries if entry.kind == kind]

    def render(self, limit: int = 80) -> str:
        """Return the history as text, one line per entry (the last ``limit``)."""
        lines = []
        shown = self.entries[-limit:]
        if len(shown) < len(self.entries):
            lines.append(f"... {len(self.entries) - len(shown)} earlier entries")
        for entry in shown:
            seconds = (entry.t_ms - self.start_ms) / 1000
            text = self.readable(entry.text)
            lines.append(f"t={seconds:9.3f}s {entry.inv:>6} {entry.kind:<8} {text}")
        return "\n".join(lines)
