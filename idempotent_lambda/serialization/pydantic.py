"""`PydanticSerializer`, at Powertools' path `serialization.pydantic`.

pydantic itself is not imported here: a model class brings it along.
"""

from __future__ import annotations

from typing import Any

from idempotent_lambda.exceptions import (
    IdempotencyModelTypeError,
    IdempotencyNoSerializationModelError,
)
from idempotent_lambda.serialization._models import ModelTypeSerializer, is_pydantic_type
from idempotent_lambda.serialization.base import (
    BaseIdempotencyModelSerializer,
    BaseIdempotencySerializer,
)
from idempotent_lambda.serialization.functions import get_actual_type


class PydanticSerializer(ModelTypeSerializer):
    """Store pydantic (v2) results as their JSON-mode dump and validate them back on replay.

    Args:
        model: The result type: a model class, or a type built on them such as
            `Optional[Order]` or `list[Order]`.

    Raises:
        IdempotencyModelTypeError: `model` holds no pydantic model.
    """

    _KIND = "pydantic model class"

    @staticmethod
    def _is_model(tp: Any) -> bool:
        return is_pydantic_type(tp)

    def to_dict(self, data: Any) -> Any:
        """Return `data.model_dump(mode="json")`; other values are stored as they are."""
        dump = getattr(data, "model_dump", None)
        return dump(mode="json") if callable(dump) and not isinstance(data, type) else data


# Powertools' module keeps these names here too; a literal import swap finds them.
__all__ = [
    "BaseIdempotencyModelSerializer",
    "BaseIdempotencySerializer",
    "IdempotencyModelTypeError",
    "IdempotencyNoSerializationModelError",
    "PydanticSerializer",
    "get_actual_type",
]
