"""Find dataclass and pydantic models in a type, and rebuild results from their stored dicts.

Results are stored in their dict form (`dataclasses.asdict`, pydantic's JSON-mode dump), as
Powertools stores them. On replay the type says what to rebuild: a model, `Optional[Model]`,
`list[Model]`, `dict[str, Model]`, `tuple[Model, ...]`, and models nested in dataclass fields.
"""

from __future__ import annotations

import abc
import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from idempotent_lambda.exceptions import (
    IdempotencyCorruptRecordError,
    IdempotencyModelTypeError,
    IdempotencyNoSerializationModelError,
)
from idempotent_lambda.serialization.base import (
    BaseIdempotencyModelSerializer,
    BaseIdempotencySerializer,
)

_UNIONS = (typing.Union, types.UnionType)
# typing.List[X] and friends report the builtin or collections.abc class as their origin.
_SEQUENCES = (list, tuple, set, frozenset, Sequence)
_MAPPINGS = (dict, Mapping)


def is_dataclass_type(tp: Any) -> bool:
    """Tell whether `tp` is a dataclass class (not an instance)."""
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def is_pydantic_type(tp: Any) -> bool:
    """Tell whether `tp` is a pydantic (v2) model class."""
    return isinstance(tp, type) and callable(getattr(tp, "model_validate", None))


def mentions_model(tp: Any, _seen: frozenset[int] = frozenset()) -> bool:
    """Tell whether a dataclass or pydantic class appears anywhere in the type `tp`."""
    if is_dataclass_type(tp) or is_pydantic_type(tp):
        return True
    if id(tp) in _seen:
        return False
    return any(mentions_model(arg, _seen | {id(tp)}) for arg in typing.get_args(tp))


def return_annotation(function: Callable[..., Any]) -> Any:
    """Return the function's return annotation, resolved; None when it has none.

    A `functools.partial` has its function's, a callable object its ``__call__``'s.
    """
    try:
        returned = inspect.signature(function, eval_str=True).return_annotation
    except Exception:  # unresolvable forward references: use it only if it is not a string
        try:
            returned = inspect.signature(function).return_annotation
        except (TypeError, ValueError):  # no signature (some builtins)
            return None
        if isinstance(returned, str):
            return None
    return None if returned is inspect.Signature.empty else returned


def rebuild(tp: Any, data: Any) -> Any:
    """Return `data` with the parts that `tp` describes as models rebuilt; the rest as it is.

    Raises:
        IdempotencyCorruptRecordError: Where `tp` describes models, `data` is not their stored
            form (a str where a dataclass was declared, a dict where a list of them was): the
            record was written by another version of the function, or by a call that
            returned another type. The message names the types, never the data.
    """
    if data is None or tp is None or tp is Any:
        return data
    if is_pydantic_type(tp):
        try:
            return tp.model_validate(data)
        except ValueError as exc:  # pydantic's ValidationError
            raise _mismatch(tp, data, f"does not validate as {tp.__name__}") from exc
    if is_dataclass_type(tp):
        if not isinstance(data, dict):
            raise _mismatch(tp, data, f"is not the dict form of {tp.__name__}")
        return _rebuild_dataclass(tp, data)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in _UNIONS:
        members = [arg for arg in args if arg is not type(None)]
        # Several candidates: nothing says which one the stored data was.
        return rebuild(members[0], data) if len(members) == 1 else data
    if origin is typing.Annotated:
        return rebuild(args[0], data)
    return _rebuild_items(tp, origin, args, data)


def _rebuild_items(tp: Any, origin: Any, args: tuple[Any, ...], data: Any) -> Any:
    """`rebuild` the values of a mapping, or the items of a sequence, that ``tp`` describes."""
    if origin in _MAPPINGS and len(args) == 2:
        if isinstance(data, dict):
            return {key: rebuild(args[1], value) for key, value in data.items()}
    elif origin in _SEQUENCES and args:
        if isinstance(data, list | tuple | set | frozenset):
            if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
                items = [rebuild(arg, item) for arg, item in zip(args, data, strict=False)]
            else:
                items = [rebuild(args[0], item) for item in data]
            return type(data)(items) if isinstance(data, tuple | set | frozenset) else items
    else:
        return data
    if mentions_model(tp):
        raise _mismatch(tp, data, f"is not a {origin.__name__}")
    return data


def _rebuild_dataclass(cls: type[Any], data: dict[str, Any]) -> Any:
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # unresolvable forward references: rebuild this level only
        hints = {}
    values = {
        field.name: rebuild(hints.get(field.name), data[field.name])
        for field in dataclasses.fields(cls)
        if field.init and field.name in data
    }
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:  # fields missing, or refused by __post_init__
        raise _mismatch(cls, data, f"does not build a {cls.__name__}") from exc


def _mismatch(tp: Any, data: Any, why: str) -> IdempotencyCorruptRecordError:
    return IdempotencyCorruptRecordError(
        f"the stored result (a {type(data).__name__}) {why}, the type the function returns: it "
        "was stored by another version of the function, or by a call that returned another type"
    )


class ModelTypeSerializer(BaseIdempotencyModelSerializer):
    """A serializer built from one result type that holds models of one kind.

    A subclass names its models (`_is_model`, `_KIND` for errors) and writes its `to_dict`.

    Raises:
        IdempotencyModelTypeError: `model` holds no model of the subclass's kind.
    """

    _KIND: ClassVar[str]

    def __init__(self, model: Any) -> None:
        if not self._mentions_model(model):
            raise IdempotencyModelTypeError(f"{model!r} is not a {self._KIND}")
        self._model = model

    @staticmethod
    @abc.abstractmethod
    def _is_model(tp: Any) -> bool:
        """Tell whether `tp` is a model class of this serializer's kind."""

    def from_dict(self, data: Any) -> Any:
        """Rebuild the model (or the structure of them) from its stored form."""
        return rebuild(self._model, data)

    @classmethod
    def instantiate(cls, model_type: Any) -> BaseIdempotencySerializer:
        """Return a serializer for the return annotation `model_type`.

        Raises:
            IdempotencyNoSerializationModelError: `model_type` is None (no annotation).
            IdempotencyModelTypeError: `model_type` holds no model of this kind.
        """
        if model_type is None:
            raise IdempotencyNoSerializationModelError(
                f"{cls.__name__} needs a return annotation on the function, "
                f"or pass {cls.__name__}(model=...)"
            )
        return cls(model_type)

    def _mentions_model(self, tp: Any) -> bool:
        return self._is_model(tp) or any(self._mentions_model(arg) for arg in typing.get_args(tp))
