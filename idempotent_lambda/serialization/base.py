"""The serializer contracts, at Powertools' path `serialization.base`.

A serializer turns a function's result into JSON-like data before it is stored, and that data
back into the result on replay.
"""

from __future__ import annotations

import abc
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class BaseIdempotencySerializer(Protocol):
    """Convert a result to stored data and back.

    Any object with these two methods is one; a subclass, as Powertools documents, works too.
    """

    def to_dict(self, data: Any) -> Any:
        """Return the JSON-like form of `data`."""
        ...

    def from_dict(self, data: Any) -> Any:
        """Rebuild the result from its JSON-like form."""
        ...


class BaseIdempotencyModelSerializer(BaseIdempotencySerializer):
    """A serializer whose class may be passed as `output_serializer`.

    The class is then built from the function's return annotation with `instantiate`.
    """

    @abc.abstractmethod
    def to_dict(self, data: Any) -> Any:
        """Return the JSON-like form of `data`."""

    @abc.abstractmethod
    def from_dict(self, data: Any) -> Any:
        """Rebuild the result from its JSON-like form."""

    @classmethod
    @abc.abstractmethod
    def instantiate(cls, model_type: Any) -> BaseIdempotencySerializer:
        """Return a serializer for `model_type` (None when the function has no annotation).

        Raises:
            IdempotencyNoSerializationModelError: `model_type` is None.
            IdempotencyModelTypeError: The serializer cannot handle `model_type`.
        """


__all__ = ["BaseIdempotencyModelSerializer", "BaseIdempotencySerializer"]
