"""Output serializers: how dataclass and pydantic results are stored and rebuilt on replay.

Names match Powertools' ``serialization`` modules. A serializer turns a result into JSON-like data
before it is stored and back into the original type on replay.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from idempotent_lambda.exceptions import IdempotencyConfigError


@runtime_checkable
class BaseIdempotencySerializer(Protocol):
    """Converts a result to stored data and back."""

    def to_dict(self, data: Any) -> Any:
        """Return the JSON-like form of ``data``."""
        ...

    def from_dict(self, data: Any) -> Any:
        """Rebuild the result from its JSON-like form."""
        ...


class NoOpSerializer:
    """Store results as they are (dicts, lists, scalars, Decimal, ...)."""

    def to_dict(self, data: Any) -> Any:
        """Return ``data`` unchanged."""
        return data

    def from_dict(self, data: Any) -> Any:
        """Return ``data`` unchanged."""
        return data


class DataclassSerializer:
    """Store a dataclass result as a dict and rebuild the dataclass on replay."""

    def __init__(self, model: type[Any]) -> None:
        if not (isinstance(model, type) and dataclasses.is_dataclass(model)):
            raise IdempotencyConfigError(f"{model!r} is not a dataclass")
        self._model = model

    def to_dict(self, data: Any) -> Any:
        """Return ``dataclasses.asdict(data)``."""
        return dataclasses.asdict(data)

    def from_dict(self, data: Any) -> Any:
        """Rebuild the dataclass from its fields."""
        return self._model(**data)


class PydanticSerializer:
    """Store a pydantic v2 model result as its JSON form and validate it back on replay."""

    def __init__(self, model: type[Any]) -> None:
        if not (isinstance(model, type) and hasattr(model, "model_validate")):
            raise IdempotencyConfigError(f"{model!r} is not a pydantic model class")
        self._model = model

    def to_dict(self, data: Any) -> Any:
        """Return ``data.model_dump(mode="json")``."""
        return data.model_dump(mode="json")

    def from_dict(self, data: Any) -> Any:
        """Return ``Model.model_validate(data)``."""
        return self._model.model_validate(data)


def resolve_serializer(output_serializer: Any, function: Callable[..., Any]) -> Any:
    """Pick the serializer: the one given, one for a given class, or one from the return type.

    Raises:
        IdempotencyConfigError: ``output_serializer`` is neither a serializer nor a supported
            class.
    """
    if output_serializer is None:
        return _from_annotation(function) or NoOpSerializer()
    if isinstance(output_serializer, type):
        if issubclass(output_serializer, DataclassSerializer | PydanticSerializer):
            # Powertools' form: the serializer class, its model taken from the return annotation.
            returned = _return_annotation(function)
            if returned is None:
                raise IdempotencyConfigError(
                    f"output_serializer={output_serializer.__name__} needs a return annotation "
                    f"on {function.__qualname__}, or pass {output_serializer.__name__}(model=...)"
                )
            return output_serializer(returned)
        serializer = _for_class(output_serializer)
        if serializer is None:
            if isinstance(output_serializer, BaseIdempotencySerializer):
                try:
                    return output_serializer()
                except TypeError as exc:
                    raise IdempotencyConfigError(
                        f"output_serializer {output_serializer!r} cannot be built without "
                        "arguments; pass an instance"
                    ) from exc
            raise IdempotencyConfigError(
                f"output_serializer {output_serializer!r} is not a dataclass or pydantic model"
            )
        return serializer
    if isinstance(output_serializer, BaseIdempotencySerializer):
        return output_serializer
    raise IdempotencyConfigError("output_serializer must have to_dict and from_dict methods")


def _for_class(model: type[Any]) -> Any:
    if dataclasses.is_dataclass(model):
        return DataclassSerializer(model)
    if hasattr(model, "model_validate") and hasattr(model, "model_dump"):
        return PydanticSerializer(model)
    return None


def _from_annotation(function: Callable[..., Any]) -> Any:
    returned = _return_annotation(function)
    return None if returned is None else _for_class(returned)


def _return_annotation(function: Callable[..., Any]) -> type[Any] | None:
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # unresolvable forward references: no annotation to go by
        return None
    returned = hints.get("return")
    return returned if isinstance(returned, type) else None
