"""`DataclassSerializer`, at Powertools' path `serialization.dataclass`."""

from __future__ import annotations

import dataclasses
from typing import Any

from idempotent_lambda.exceptions import (
    IdempotencyModelTypeError,
    IdempotencyNoSerializationModelError,
)
from idempotent_lambda.serialization._models import ModelTypeSerializer, is_dataclass_type
from idempotent_lambda.serialization.base import (
    BaseIdempotencyModelSerializer,
    BaseIdempotencySerializer,
)
from idempotent_lambda.serialization.functions import get_actual_type

DataClass = Any


class DataclassSerializer(ModelTypeSerializer):
    """Store dataclass results as dicts and rebuild them on replay.

    Args:
        model: The result type: a dataclass, or a type built on them such as `Optional[Order]`
            or `list[Order]`. Nested dataclass fields are rebuilt too.

    Raises:
        IdempotencyModelTypeError: `model` holds no dataclass.
    """

    _KIND = "dataclass type"

    @staticmethod
    def _is_model(tp: Any) -> bool:
        return is_dataclass_type(tp)

    def to_dict(self, data: Any) -> Any:
        """Return `dataclasses.asdict(data)`; other values are stored as they are."""
        if dataclasses.is_dataclass(data) and not isinstance(data, type):
            return dataclasses.asdict(data)
        return data


# Powertools' module keeps these names here too; a literal import swap finds them.
__all__ = [
    "BaseIdempotencyModelSerializer",
    "BaseIdempotencySerializer",
    "DataclassSerializer",
    "IdempotencyModelTypeError",
    "IdempotencyNoSerializationModelError",
    "get_actual_type",
]
