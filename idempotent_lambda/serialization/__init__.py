"""Output serializers: how results are stored and rebuilt on replay.

The modules are Powertools' (`base`, `no_op`, `dataclass`, `pydantic`, `custom_dict`,
`functions`); every name is importable from here too. Dataclass and pydantic results (also in
lists and dicts, and without a serializer) are stored in their dict form, as Powertools stores
them; `resolve_serializer` decides what is rebuilt on replay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from idempotent_lambda.exceptions import IdempotencyConfigError
from idempotent_lambda.serialization._models import (
    is_dataclass_type,
    is_pydantic_type,
    mentions_model,
    rebuild,
    return_annotation,
)
from idempotent_lambda.serialization.base import (
    BaseIdempotencyModelSerializer,
    BaseIdempotencySerializer,
)
from idempotent_lambda.serialization.custom_dict import CustomDictSerializer
from idempotent_lambda.serialization.dataclass import DataclassSerializer
from idempotent_lambda.serialization.functions import get_actual_type
from idempotent_lambda.serialization.no_op import NoOpSerializer
from idempotent_lambda.serialization.pydantic import PydanticSerializer


class ReturnTypeSerializer(BaseIdempotencySerializer):
    """Rebuild results as the return annotation describes them (`-> list[Order]`, ...).

    Used when no `output_serializer` is given and the annotation mentions a model.
    """

    def __init__(self, annotation: Any) -> None:
        self._annotation = annotation

    def to_dict(self, data: Any) -> Any:
        """Return `data` unchanged (models in it are stored in their dict form)."""
        return data

    def from_dict(self, data: Any) -> Any:
        """Rebuild the models the annotation describes."""
        return rebuild(self._annotation, data)


class _NoneSafe(BaseIdempotencySerializer):
    """A user's serializer, not called for None: Powertools never passes None to one."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def to_dict(self, data: Any) -> Any:
        return None if data is None else self._inner.to_dict(data)

    def from_dict(self, data: Any) -> Any:
        return None if data is None else self._inner.from_dict(data)


_OURS = (NoOpSerializer, DataclassSerializer, PydanticSerializer, CustomDictSerializer)


def resolve_serializer(output_serializer: Any, function: Callable[..., Any]) -> Any:
    """Return the serializer for `output_serializer` and the function's return annotation.

    Accepted: None (the annotation decides), a serializer, a model serializer class such as
    `DataclassSerializer` (built from the annotation), a dataclass or pydantic class, or a
    serializer class that needs no arguments.

    Raises:
        IdempotencyConfigError: None of those, or a serializer class that cannot be built for
            the annotation (`IdempotencyModelTypeError`, `IdempotencyNoSerializationModelError`).
    """
    if output_serializer is None:
        returned = return_annotation(function)
        return ReturnTypeSerializer(returned) if mentions_model(returned) else NoOpSerializer()
    if isinstance(output_serializer, type):
        if issubclass(output_serializer, BaseIdempotencyModelSerializer):
            return _none_safe(output_serializer.instantiate(return_annotation(function)))
        if is_dataclass_type(output_serializer):
            return DataclassSerializer(output_serializer)
        if is_pydantic_type(output_serializer):
            return PydanticSerializer(output_serializer)
        if isinstance(output_serializer, BaseIdempotencySerializer):
            try:
                return _none_safe(output_serializer())
            except TypeError as exc:
                raise IdempotencyConfigError(
                    f"output_serializer {output_serializer!r} cannot be built without "
                    "arguments; pass an instance"
                ) from exc
        raise IdempotencyConfigError(
            f"output_serializer {output_serializer!r} is not a dataclass or pydantic model"
        )
    if isinstance(output_serializer, BaseIdempotencySerializer):
        return _none_safe(output_serializer)
    raise IdempotencyConfigError("output_serializer must have to_dict and from_dict methods")


def _none_safe(serializer: Any) -> Any:
    return serializer if type(serializer) in _OURS else _NoneSafe(serializer)


__all__ = [
    "BaseIdempotencyModelSerializer",
    "BaseIdempotencySerializer",
    "CustomDictSerializer",
    "DataclassSerializer",
    "NoOpSerializer",
    "PydanticSerializer",
    "ReturnTypeSerializer",
    "get_actual_type",
    "resolve_serializer",
]
