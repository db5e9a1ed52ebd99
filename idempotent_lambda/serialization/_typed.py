"""What the dataclass and pydantic serializers share: a result type, rebuilt from on replay."""

from __future__ import annotations

import abc
import typing
from typing import Any, ClassVar

from idempotent_lambda.exceptions import (
    IdempotencyModelTypeError,
    IdempotencyNoSerializationModelError,
)
from idempotent_lambda.serialization._models import rebuild
from idempotent_lambda.serialization.base import (
    BaseIdempotencyModelSerializer,
    BaseIdempotencySerializer,
)


class ModelTypeSerializer(BaseIdempotencyModelSerializer):
    """A serializer built from one result type that has models of one kind in it.

    A subclass says which classes are its models (``_is_model``) and what to call them in an
    error (``_KIND``); it writes its own `to_dict`.

    Raises:
        IdempotencyModelTypeError: ``model`` has no model of the subclass's kind in it.
    """

    _KIND: ClassVar[str]

    def __init__(self, model: Any) -> None:
        if not self._mentions_model(model):
            raise IdempotencyModelTypeError(f"{model!r} is not a {self._KIND}")
        self._model = model

    @staticmethod
    @abc.abstractmethod
    def _is_model(tp: Any) -> bool:
        """Tell whether ``tp`` is a model class of this serializer's kind."""

    def from_dict(self, data: Any) -> Any:
        """Rebuild the model (or the structure of them) from its stored form."""
        return rebuild(self._model, data)

    @classmethod
    def instantiate(cls, model_type: Any) -> BaseIdempotencySerializer:
        """Return a serializer for the return annotation ``model_type``.

        Raises:
            IdempotencyNoSerializationModelError: ``model_type`` is None (no annotation).
            IdempotencyModelTypeError: ``model_type`` has no model of this kind in it.
        """
        if model_type is None:
            raise IdempotencyNoSerializationModelError(
                f"{cls.__name__} needs a return annotation on the function, "
                f"or pass {cls.__name__}(model=...)"
            )
        return cls(model_type)

    def _mentions_model(self, tp: Any) -> bool:
        return self._is_model(tp) or any(self._mentions_model(arg) for arg in typing.get_args(tp))
