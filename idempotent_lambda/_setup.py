"""What a function was decorated with, kept on the decorated function for tools to read.

`idempotent-lambda key --handler app:handler` imports the handler and dry-runs its event
through the same decorator with the same settings (`setup_of`), so the key it prints is the one
the function stores, whatever its `event_key_jmespath`, prefix or record format. Every public
decorator exposes its setup with `exposing`; `functools.wraps` in an outer decorator (the
durable SDK's, say) copies it onto the outer function too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

from idempotent_lambda._entry import named_by

F = TypeVar("F", bound=Callable[..., Any])
G = TypeVar("G")
_ATTRIBUTE = "__idempotent_lambda_setup__"


@dataclass(frozen=True, slots=True)
class DecoratorSetup:
    """One decoration: the decorator's name, its keyword arguments, and the function it wraps.

    Attributes:
        decorator: The public decorator's name (``"idempotent_sqs_handler"``).
        options: The keyword arguments it was given, ``persistence_store`` and ``config`` too.
        module: The module of the function that names its default prefix.
        qualname: That function's qualified name.
    """

    decorator: str
    options: Mapping[str, Any]
    module: str
    qualname: str


def exposing(
    decorator: str, options: Mapping[str, Any], decorate: Callable[[F], G]
) -> Callable[[F], G]:
    """Return ``decorate``, made to leave a `DecoratorSetup` on each function it returns."""
    kept = MappingProxyType(dict(options))

    def decorate_and_expose(function: F) -> G:
        decorated = decorate(function)
        named = named_by(function)
        setup = DecoratorSetup(decorator, kept, named.__module__, named.__qualname__)
        setattr(decorated, _ATTRIBUTE, setup)
        return decorated

    return decorate_and_expose


def setup_of(function: object) -> DecoratorSetup | None:
    """Return how ``function`` was decorated by this library; None when it was not."""
    found = getattr(function, _ATTRIBUTE, None)
    return found if isinstance(found, DecoratorSetup) else None
