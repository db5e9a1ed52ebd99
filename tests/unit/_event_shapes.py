"""Compare events by shape: the paths of their fields, and the JSON type at each."""

from __future__ import annotations

from typing import Any


def paths(value: Any, prefix: str = "") -> set[str]:
    """Return the dotted path of every field of an event (list items under `[]`)."""
    found: set[str] = set()
    if isinstance(value, dict):
        for name, item in value.items():
            found.add(prefix + name)
            found |= paths(item, f"{prefix}{name}.")
    elif isinstance(value, list):
        for item in value:
            found |= paths(item, f"{prefix}[].")
    return found


def types_by_path(value: Any, prefix: str = "") -> dict[str, type]:
    """Return the JSON type at every field path (as `paths`, with the leaf types)."""
    found: dict[str, type] = {prefix.rstrip("."): type(value)} if prefix else {}
    if isinstance(value, dict):
        for name, item in value.items():
            found |= types_by_path(item, f"{prefix}{name}.")
    elif isinstance(value, list):
        for item in value:
            found |= types_by_path(item, f"{prefix}[].")
    return found
