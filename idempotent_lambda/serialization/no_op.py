"""`NoOpSerializer`, at Powertools' path `serialization.no_op`."""

from __future__ import annotations

from typing import Any

from idempotent_lambda.serialization.base import BaseIdempotencySerializer


class NoOpSerializer(BaseIdempotencySerializer):
    """Store results as they are; dataclass and pydantic instances in them replay as dicts."""

    def to_dict(self, data: Any) -> Any:
        """Return `data` unchanged."""
        return data

    def from_dict(self, data: Any) -> Any:
        """Return `data` unchanged."""
        return data


__all__ = ["NoOpSerializer"]
