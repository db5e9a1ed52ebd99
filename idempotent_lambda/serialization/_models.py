"""Rebuild dataclass and pydantic results from their stored dict form, guided by a type.

Results are stored in their dict form (``dataclasses.asdict``, pydantic's JSON-mode dump), as
Powertools stores them; see `idempotent_lambda._result_codec`. On replay the type that describes
the result says what to rebuild: a model, ``Optional[Model]``, ``list[Model]``,
``dict[str, Model]``, ``tuple[Model, ...]``, and models nested in dataclass fields.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

_UNIONS = (typing.Union, types.UnionType)
# typing.List[X] and friends report the builtin or collections.abc class as their origin.
_SEQUENCES = (list, tuple, set, frozenset, Sequence)
_MAPPINGS = (dict, Mapping)


def is_dataclass_type(tp: Any) -> bool:
    """Tell whether ``tp`` is a dataclass class (not an instance)."""
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def is_pydantic_type(tp: Any) -> bool:
    """Tell whether ``tp`` is a pydantic (v2) model class."""
    return isinstance(tp, type) and callable(getattr(tp, "model_validate", None))


def mentions_model(tp: Any, _seen: frozenset[int] = frozenset()) -> bool:
    """Tell whether a dataclass or pydantic class appears anywhere in the type ``tp``."""
    if is_dataclass_type(tp) or is_pydantic_type(tp):
        return True
    if id(tp) in _seen:
        return False
    return any(mentions_model(arg, _seen | {id(tp)}) for arg in typing.get_args(tp))


def rebuild(tp: Any, data: Any) -> Any:
    """Return ``data`` with the parts ``tp`` describes as models rebuilt into instances.

    Parts the type does not describe (or describes as plain data) are returned as they are.
    """
    if data is None or tp is None or tp is Any:
        return data
    if is_pydantic_type(tp):
        return tp.model_validate(data)
    if is_dataclass_type(tp):
        return _rebuild_dataclass(tp, data) if isinstance(data, dict) else data
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in _UNIONS:
        return _rebuild_union(args, data)
    if origin is typing.Annotated:
        return rebuild(args[0], data)
    if origin in _MAPPINGS and len(args) == 2 and isinstance(data, dict):
        return {key: rebuild(args[1], value) for key, value in data.items()}
    if origin in _SEQUENCES and args and isinstance(data, list | tuple | set | frozenset):
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            items = [rebuild(arg, item) for arg, item in zip(args, data, strict=False)]
        else:
            items = [rebuild(args[0], item) for item in data]
        return type(data)(items) if isinstance(data, tuple | set | frozenset) else items
    return data


def _rebuild_union(args: tuple[Any, ...], data: Any) -> Any:
    members = [arg for arg in args if arg is not type(None)]
    if len(members) == 1:
        return rebuild(members[0], data)
    return data  # several candidates: nothing says which one the stored data was


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
    return cls(**values)
