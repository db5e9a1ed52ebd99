"""`NoOpSerializer` (Powertools' module path ``serialization.no_op``)."""

from __future__ import annotations

from typing import Any

from idempotent_lambda.serialization.base import BaseIdempotencySerializer


class NoOpSerializer(BaseIdempotencySerializer):
    """Store results as they are (dicts, lists, scalars, Decimal, ...).

    Dataclass and pydantic instances inside such a result are still stored, in their dict form,
    and replay as dicts.
    """

    def to_dict(self, data: Any) -> Any:
        """Return ``data`` unchanged."""
        return data

    def from_dict(self, data: Any) -> Any:
        """Return ``data`` unchanged."""
        return data


__all__ = ["NoOpSerializer"]
