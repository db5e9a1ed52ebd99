"""`PydanticSerializer` (Powertools' module path ``serialization.pydantic``).

pydantic itself is not imported here: a model class brings it along.
"""

from __future__ import annotations

import typing
from typing import Any

from idempotent_lambda.exceptions import (
    IdempotencyModelTypeError,
    IdempotencyNoSerializationModelError,
)
from idempotent_lambda.serialization._models import is_pydantic_type, rebuild
from idempotent_lambda.serialization.base import (
    BaseIdempotencyModelSerializer,
    BaseIdempotencySerializer,
)
from idempotent_lambda.serialization.functions import get_actual_type


class PydanticSerializer(BaseIdempotencyModelSerializer):
    """Store pydantic (v2) results as their JSON-mode dump and validate them back on replay.

    Args:
        model: The result type: a model class, or a type built on models such as
            ``Optional[Order]`` or ``list[Order]``.

    Raises:
        IdempotencyModelTypeError: ``model`` has no pydantic model in it.
    """

    def __init__(self, model: Any) -> None:
        if not _has_model(model):
            raise IdempotencyModelTypeError(f"{model!r} is not a pydantic model class")
        self._model = model

    def to_dict(self, data: Any) -> Any:
        """Return ``data.model_dump(mode="json")`` (other values are stored as they are)."""
        dump = getattr(data, "model_dump", None)
        return dump(mode="json") if callable(dump) and not isinstance(data, type) else data

    def from_dict(self, data: Any) -> Any:
        """Validate the stored form back into the model (or the structure of them)."""
        return rebuild(self._model, data)

    @classmethod
    def instantiate(cls, model_type: Any) -> BaseIdempotencySerializer:
        """Return a serializer for the return annotation ``model_type``.

        Raises:
            IdempotencyNoSerializationModelError: ``model_type`` is None (no annotation).
            IdempotencyModelTypeError: ``model_type`` has no pydantic model in it.
        """
        if model_type is None:
            raise IdempotencyNoSerializationModelError(
                "PydanticSerializer needs a return annotation on the function, "
                "or pass PydanticSerializer(model=...)"
            )
        return cls(model_type)


def _has_model(tp: Any) -> bool:
    return is_pydantic_type(tp) or any(_has_model(arg) for arg in typing.get_args(tp))


__all__ = [
    "PydanticSerializer",
    "get_actual_type",
]
