"""`get_actual_type`, at Powertools' path `serialization.functions`."""

from __future__ import annotations

import types
import typing
from typing import Any

from idempotent_lambda.exceptions import IdempotencyModelTypeError


def get_actual_type(model_type: Any) -> Any:
    """Return `model_type` without an `Optional`/`| None` around it.

    Raises:
        IdempotencyModelTypeError: A union of more than one type besides None.
    """
    if typing.get_origin(model_type) not in (typing.Union, types.UnionType):
        return model_type
    members = [arg for arg in typing.get_args(model_type) if arg is not type(None)]
    if len(members) != 1:
        raise IdempotencyModelTypeError(
            "expected one type, optionally with None, not a union of several types"
        )
    return members[0]


__all__ = ["get_actual_type"]
