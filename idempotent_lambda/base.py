"""Powertools' module path ``base``: `IdempotencyHandler` and the names Powertools keeps there.

`IdempotencyHandler` runs one call of a function idempotently, the way Powertools' decorators use
it internally; here it is a thin layer over `idempotent_function`, so it follows this library's
lifecycle (owner fencing, exact replays). The decorators do not use it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from idempotent_lambda._record_format import STATUS_CONSTANTS
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.decorators import idempotent_function
from idempotent_lambda.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyInconsistentStateError,
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
    IdempotencyKeyError,
    IdempotencyPersistenceLayerError,
    IdempotencyValidationError,
)
from idempotent_lambda.persistence._powertools_layer import DataRecord
from idempotent_lambda.persistence.protocol import PersistenceStore
from idempotent_lambda.serialization.no_op import NoOpSerializer

MAX_RETRIES = 2
"""Powertools' retry count on an inconsistent store answer (the engine has its own bound)."""


class IdempotencyHandler:
    """Run ``function(*function_args, **function_kwargs)`` once per ``function_payload``.

    The key prefix is the function's own, as with the decorators, unless ``key_prefix`` is given.

    Args:
        function: The function to run.
        function_payload: What identifies the request (hashed, with ``config``'s expressions).
        config: Key, validation and expiry settings.
        persistence_store: Where records live.
        output_serializer: A serializer for the result; None stores it as it is.
        key_prefix: Replaces the default prefix.
        function_args: Positional arguments for ``function``.
        function_kwargs: Keyword arguments for ``function``.
    """

    def __init__(  # noqa: PLR0917 - Powertools' signature
        self,
        function: Callable[..., Any],
        function_payload: Any,
        config: IdempotencyConfig,
        persistence_store: PersistenceStore,
        output_serializer: Any = None,
        key_prefix: str | None = None,
        function_args: tuple[Any, ...] | None = None,
        function_kwargs: dict[str, Any] | None = None,
    ) -> None:
        args, kwargs = function_args or (), function_kwargs or {}

        def run(payload: Any) -> Any:
            return function(*args, **kwargs)

        # The key prefix is derived from these, so the record is the decorated function's own.
        run.__module__ = function.__module__
        run.__qualname__ = function.__qualname__
        run.__name__ = getattr(function, "__name__", run.__name__)
        self.function = function
        self.data = function_payload
        self.config = config
        self.persistence_store = persistence_store
        self.output_serializer = output_serializer or NoOpSerializer()
        self._run = idempotent_function(
            data_keyword_argument="payload",
            persistence_store=persistence_store,
            config=config,
            output_serializer=self.output_serializer,
            key_prefix=key_prefix,
        )(run)

    def handle(self, is_replay: bool = False) -> Any:
        """Run the function, or return the earlier run's result (``is_replay`` is ignored)."""
        return self._run(payload=self.data)


__all__ = [
    "MAX_RETRIES",
    "STATUS_CONSTANTS",
    "DataRecord",
    "IdempotencyAlreadyInProgressError",
    "IdempotencyHandler",
    "IdempotencyInconsistentStateError",
    "IdempotencyItemAlreadyExistsError",
    "IdempotencyItemNotFoundError",
    "IdempotencyKeyError",
    "IdempotencyPersistenceLayerError",
    "IdempotencyValidationError",
    "NoOpSerializer",
]
