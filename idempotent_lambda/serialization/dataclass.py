"""`DataclassSerializer` (Powertools' module path ``serialization.dataclass``)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from idempotent_lambda.exceptions import (
    IdempotencyModelTypeError,
    IdempotencyNoSerializationModelError,
)
from idempotent_lambda.serialization._models import is_dataclass_type, rebuild
from idempotent_lambda.serialization.base import (
    BaseIdempotencyModelSerializer,
    BaseIdempotencySerializer,
)
from idempotent_lambda.serialization.functions import get_actual_type

DataClass = Any


class DataclassSerializer(BaseIdempotencyModelSerializer):
    """Store dataclass results as dicts and rebuild them on replay.

    Args:
        model: The result type: a dataclass, or a type built on dataclasses such as
            ``Optional[Order]`` or ``list[Order]``. Nested dataclass fields are rebuilt too.

    Raises:
        IdempotencyModelTypeError: ``model`` has no dataclass in it.
    """

    def __init__(self, model: Any) -> None:
        if not _has_dataclass(model):
            raise IdempotencyModelTypeError(f"{model!r} is not a dataclass type")
        self._model = model

    def to_dict(self, data: Any) -> Any:
        """Return ``dataclasses.asdict(data)`` (other values are stored as they are)."""
        if dataclasses.is_dataclass(data) and not isinstance(data, type):
            return dataclasses.asdict(data)
        return data

    def from_dict(self, data: Any) -> Any:
        """Rebuild the dataclass (or the structure of them) from its stored form."""
        return rebuild(self._model, data)

    @classmethod
    def instantiate(cls, model_type: Any) -> BaseIdempotencySerializer:
        """Return a serializer for the return annotation ``model_type``.

        Raises:
            IdempotencyNoSerializationModelError: ``model_type`` is None (no annotation).
            IdempotencyModelTypeError: ``model_type`` has no dataclass in it.
        """
        if model_type is None:
            raise IdempotencyNoSerializationModelError(
                "DataclassSerializer needs a return annotation on the function, "
                "or pass DataclassSerializer(model=...)"
            )
        return cls(model_type)


def _has_dataclass(tp: Any) -> bool:
    return is_dataclass_type(tp) or any(_has_dataclass(arg) for arg in typing.get_args(tp))


__all__ = [
    "DataclassSerializer",
    "get_actual_type",
]
