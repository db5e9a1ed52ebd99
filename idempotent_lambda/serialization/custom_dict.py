"""`CustomDictSerializer`, at Powertools' path `serialization.custom_dict`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from idempotent_lambda.serialization.base import BaseIdempotencySerializer


class CustomDictSerializer(BaseIdempotencySerializer):
    """A serializer made of two functions; None is stored and replayed without calling either.

    Args:
        to_dict: Turns a result into JSON-like data.
        from_dict: Turns that data back into a result.
    """

    def __init__(self, to_dict: Callable[[Any], Any], from_dict: Callable[[Any], Any]) -> None:
        self._to_dict = to_dict
        self._from_dict = from_dict

    def to_dict(self, data: Any) -> Any:
        """Return `to_dict(data)`; None stays None."""
        return None if data is None else self._to_dict(data)

    def from_dict(self, data: Any) -> Any:
        """Return `from_dict(data)`; None stays None."""
        return None if data is None else self._from_dict(data)


__all__ = ["CustomDictSerializer"]
