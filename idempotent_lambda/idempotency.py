"""Powertools' module path ``idempotency``: where its decorators are defined.

Thin re-exports; the decorators live in `idempotent_lambda.decorators`.
"""

from __future__ import annotations

from typing import TypeVar

from idempotent_lambda.base import IdempotencyHandler
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.decorators import idempotent, idempotent_function
from idempotent_lambda.serialization.base import (
    BaseIdempotencyModelSerializer,
    BaseIdempotencySerializer,
)

EventT = TypeVar("EventT")
"""The event type of a decorated handler (Powertools' name)."""
ContextT = TypeVar("ContextT")
"""The context type of a decorated handler (Powertools' name)."""

__all__ = [
    "BaseIdempotencyModelSerializer",
    "BaseIdempotencySerializer",
    "ContextT",
    "EventT",
    "IdempotencyConfig",
    "IdempotencyHandler",
    "idempotent",
    "idempotent_function",
]
