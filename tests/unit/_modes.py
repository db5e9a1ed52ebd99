"""Run one test as a ``def`` and as an ``async def`` decorated function (the `mode` fixture)."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class Mode:
    """How a test decorates and calls its function: as ``def`` or as ``async def``.

    Test bodies are written once as plain functions; in async mode `wrap` turns each into an
    ``async def`` that calls it, so the decorator sees a coroutine function, and `call` runs the
    returned coroutine to completion.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.is_async = name == "async"

    def wrap(self, decorator: Callable[[Any], Any], body: Callable[..., Any]) -> Any:
        """Return ``decorator`` applied to ``body``, or to an ``async def`` that calls it."""
        if not self.is_async:
            return decorator(body)

        @functools.wraps(body)
        async def async_body(*args: Any, **kwargs: Any) -> Any:
            return body(*args, **kwargs)

        return decorator(async_body)

    def call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call a decorated function and return its result (the coroutine's, in async mode)."""
        result = function(*args, **kwargs)
        if not self.is_async:
            return result
        assert asyncio.iscoroutine(result)
        return _complete(result)


def _complete(coroutine: Any) -> Any:
    """Run ``coroutine`` to its end, also from inside a running loop (a nested call).

    A nested call comes from a body running on an event loop, which cannot run a second loop;
    it runs on a fresh loop in a worker thread, in a copy of the caller's context (so it sees
    the bound Lambda context), while the outer body waits for it.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    context = contextvars.copy_context()
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(context.run, asyncio.run, coroutine).result()
