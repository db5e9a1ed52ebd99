"""An invocation's identity: key, validation hash, owner token and lease, computed once."""

from __future__ import annotations

import gc
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

from idempotent_lambda._lambda_context import LambdaContextLike, remaining_ms
from idempotent_lambda._record_format import NATIVE, RecordFormat, lambda_function_name
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import IdempotencyConfigError, IdempotencyKeyError

_CONTAINERS = (list, tuple, dict, set, frozenset)


class Invocation(NamedTuple):
    """Who this invocation is, as every store call needs it: an immutable value, built per call.

    Attributes:
        key: ``"{prefix}#{hexdigest}"``.
        payload_hash: Hex digest of the validated part of the payload, or None.
        owner: Fresh random token fencing this invocation's claim.
        lease_end_ms: When this invocation's claim stops protecting it.
        deadline_ms: When the invocation itself must be done (Lambda's deadline), if known.
        now_ms: The store clock's reading the identity was derived at (the first claim's time).
    """

    key: str
    payload_hash: str | None
    owner: str
    lease_end_ms: int
    deadline_ms: int | None
    now_ms: int

    def expiry_seconds(self, now_ms: int, expires_after_seconds: int) -> int:
        """Return the record expiration for a write at ``now_ms``, never before the lease ends."""
        return max(now_ms // 1000 + expires_after_seconds, -(-self.lease_end_ms // 1000))


def default_prefix(function: Callable[..., Any]) -> str:
    """Return ``"{AWS_LAMBDA_FUNCTION_NAME or 'local'}.{module}.{qualname}"`` (env read now)."""
    return f"{lambda_function_name()}.{function.__module__}.{function.__qualname__}"


_reserved: dict[int, dict[str, Callable[[], object]]] = {}  # id(store) -> name -> function
_reserved_lock = threading.RLock()  # gc.collect() below may run code that decorates


def reserve_default_prefix(store: object, function: object, named_by: Any = None) -> None:
    """Refuse a second, different function whose default prefix is already used on ``store``.

    Two functions with one ``module.qualname`` (handlers built by one factory, two lambdas in
    one module) would share keys and replay each other's results. The check is per store
    object: a test suite that rebuilds a handler with a fresh store for each test is fine. The
    same function object decorated twice is no collision. A rebuilt function (a factory called
    again, a module reloaded) is a different function: it is accepted once the earlier one is
    garbage, refused while it is alive. Functions and stores are held weakly, so neither is kept
    alive by the check; a store that cannot be weakly referenced is not checked.

    Args:
        store: The persistence store the function is decorated with.
        function: The decorated function (or callable object).
        named_by: What the default prefix is named after, when not ``function`` itself (the
            class of a callable object).

    Raises:
        IdempotencyConfigError: A different function, still alive, holds that prefix on
            ``store``.
    """
    source: Any = function if named_by is None else named_by
    name = f"{source.__module__}.{source.__qualname__}"
    with _reserved_lock:
        names = _reserved.get(id(store))
        if names is None:
            try:
                finalizer = weakref.finalize(store, _reserved.pop, id(store), None)
            except TypeError:
                return
            finalizer.atexit = False
            names = _reserved[id(store)] = {}
        holder = names.get(name)
        if holder is not None and _another(holder, function):
            gc.collect()  # an earlier function kept only by a reference cycle is garbage
        if holder is not None and _another(holder, function):
            raise IdempotencyConfigError(
                f"another function already uses the default key prefix {name!r} on this "
                "persistence store (handlers built by one factory, or two lambdas in one "
                "module, share their module and qualname); pass key_prefix= to tell their "
                "keys apart"
            )
        names[name] = _weak(function)


def _another(holder: Callable[[], object], function: object) -> bool:
    """Tell whether ``holder`` still holds a function other than ``function`` (by identity)."""
    current = holder()
    return current is not None and current is not function


def _weak(function: object) -> Callable[[], object]:
    try:
        return weakref.ref(function)
    except TypeError:  # an object without weak references: hold it
        return lambda: function


def prefix_source(
    function: Callable[..., Any], record_format: RecordFormat = NATIVE
) -> Callable[[], str]:
    """Return a function that answers `default_prefix` for ``function`` on every call.

    The environment is still read on each call; the prefix is rebuilt only when the function name
    it reads has changed. Another ``record_format`` names an unnamed function its own way.
    """
    if record_format is not NATIVE:
        function_name = record_format.function_name
        path = f"{function.__module__}.{function.__qualname__}"
        return lambda: f"{function_name()}.{path}"
    built = ("", "")

    def prefix() -> str:
        nonlocal built
        name = lambda_function_name()
        if name is not built[0]:
            built = (name, f"{name}.{function.__module__}.{function.__qualname__}")
        return built[1]

    return prefix


def digest(config: IdempotencyConfig, value: Any) -> str:
    """Hash ``value`` in the config's record format (see `RecordFormat.digest`)."""
    return config.format.digest(config.hash_name, value)


def is_missing(material: Any) -> bool:
    """Tell whether key material counts as absent (None, "", empty or all-None containers)."""
    if type(material) is str:
        return not material
    if material is None:
        return True
    if isinstance(material, _CONTAINERS):
        values = material.values() if isinstance(material, dict) else material
        return all(item is None for item in values)
    return bool(material == "")


def derive_invocation(
    config: IdempotencyConfig,
    payload: Any,
    *,
    prefix: str,
    now_ms: int,
    context: LambdaContextLike | None,
) -> Invocation | None:
    """Compute the invocation's identity; None when there is no key material.

    Raises:
        IdempotencyKeyError: The payload has no JSON form (a dataclass that contains itself), or
            the key expression failed, found nothing while keys are required, or found
            something that cannot be hashed.
    """
    try:
        plain = config.format.prepare(payload)
    except (TypeError, ValueError, RecursionError) as exc:  # a cycle; pydantic without fallback
        raise IdempotencyKeyError(
            f"the payload has no JSON form to derive a key from: {type(exc).__name__}"
        ) from exc
    extracted = config.extract(plain)
    return build_invocation(
        config,
        material=extracted.key,
        validated=extracted.validation,
        prefix=prefix,
        now_ms=now_ms,
        context=context,
    )


def build_invocation(
    config: IdempotencyConfig,
    *,
    material: Any,
    validated: Any,
    prefix: str,
    now_ms: int,
    context: LambdaContextLike | None,
) -> Invocation | None:
    """Compute the identity from key and validation material already extracted.

    ``validated`` is hashed when the config has a validation expression or when the caller
    passes something to validate (the HTTP adapter's request fingerprint).

    Raises:
        IdempotencyKeyError: No key material while keys are required, or unhashable material.
    """
    if is_missing(material):
        if config.raise_on_no_idempotency_key:
            raise IdempotencyKeyError("no idempotency key found in the payload")
        return None
    payload_hash = None
    if validated is not None or config.payload_validation_jmespath:
        payload_hash = digest(config, validated)
    remaining = remaining_ms(context)
    lease_ms = remaining if remaining is not None else config.lease_seconds_without_context * 1000
    return Invocation(
        key=f"{prefix}#{digest(config, material)}",
        payload_hash=payload_hash,
        owner=os.urandom(16).hex(),
        lease_end_ms=now_ms + lease_ms,
        deadline_ms=None if remaining is None else now_ms + remaining,
        now_ms=now_ms,
    )
