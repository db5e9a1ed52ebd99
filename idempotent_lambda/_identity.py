"""An invocation's identity: key, validation hash, owner token and lease, computed once."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import Any, NamedTuple

from jmespath.functions import Functions

from idempotent_lambda._canonical import canonical_json, canonical_text, to_plain
from idempotent_lambda._effects import StoreTally
from idempotent_lambda._env import lambda_function_name
from idempotent_lambda._jmespath_compiled import CompiledExpression
from idempotent_lambda._lambda_context import LambdaContextLike, remaining_ms
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import IdempotencyKeyError

_hashers: dict[str, Callable[[bytes], Any]] = {}
_CONTAINERS = (list, tuple, dict, set, frozenset)


class Invocation(NamedTuple):
    """Who this invocation is, as every store call needs it: an immutable value.

    A named tuple: one is built per call, and nothing immutable is cheaper to build.

    Attributes:
        key: ``"{prefix}#{hexdigest}"``.
        payload_hash: Hex digest of the validated part of the payload, or None.
        owner: Fresh random token fencing this invocation's claim.
        lease_end_ms: When this invocation's claim stops protecting it.
        deadline_ms: When the invocation itself must be done (Lambda's deadline), if known.
        now_ms: The store clock's reading the identity was derived at (the first claim's time).
        tally: Its store calls so far (the one mutable thing it carries).
    """

    key: str
    payload_hash: str | None
    owner: str
    lease_end_ms: int
    deadline_ms: int | None
    now_ms: int
    tally: StoreTally

    def expiry_seconds(self, now_ms: int, expires_after_seconds: int) -> int:
        """Return the record expiration for a write at ``now_ms``, never before the lease ends."""
        return max(now_ms // 1000 + expires_after_seconds, -(-self.lease_end_ms // 1000))


def default_prefix(function: Callable[..., Any]) -> str:
    """Return ``"{AWS_LAMBDA_FUNCTION_NAME or 'local'}.{module}.{qualname}"`` (env read now)."""
    return f"{lambda_function_name()}.{function.__module__}.{function.__qualname__}"


def prefix_source(function: Callable[..., Any]) -> Callable[[], str]:
    """Return a function that answers `default_prefix` for ``function`` on every call.

    The environment is still read on each call; the prefix is rebuilt only when the function name
    it reads has changed.
    """
    built = ("", "")

    def prefix() -> str:
        nonlocal built
        name = lambda_function_name()
        if name is not built[0]:
            built = (name, f"{name}.{function.__module__}.{function.__qualname__}")
        return built[1]

    return prefix


def digest(config: IdempotencyConfig, value: Any, *, canonical: bool = False) -> str:
    """Hash the canonical JSON of ``value`` with the config's hash function.

    ``canonical`` says ``value`` is plain parsed JSON that the C encoder already spells
    canonically (see `BuiltinFunctions.canonical_root`), so the normalising pass is skipped.
    """
    return _digest(config, value, canonical)


def _digest(config: IdempotencyConfig, value: Any, canonical: bool) -> str:
    hasher = _hashers.get(config.hash_function)
    if hasher is None:
        name = config.hash_function
        hasher = getattr(hashlib, name, None) or (lambda data: hashlib.new(name, data))
        _hashers[name] = hasher
    try:
        text = canonical_text(value) if canonical else canonical_json(value)
        return hasher(text.encode("utf-8", "surrogatepass")).hexdigest()
    except RecursionError as exc:
        raise IdempotencyKeyError("key material is nested too deeply to hash") from exc
    except ValueError as exc:  # an int too long to convert to text
        raise IdempotencyKeyError(f"key material cannot be hashed: {exc}") from exc


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
        IdempotencyKeyError: The key expression failed, found nothing while keys are required, or
            found something that cannot be hashed.
    """
    plain = payload if type(payload) is dict else to_plain(payload)
    functions = config._make_functions()
    if config._validation_expression is not None:
        functions.track_floats = True
    try:
        material = _search(config._key_expression, plain, functions, "event_key_jmespath")
        validated = None
        if config._validation_expression is not None:
            validated = _search(
                config._validation_expression, plain, functions, "payload_validation_jmespath"
            )
    finally:
        # JMESPath's interpreter sits in a reference cycle holding the functions object; drop
        # the parsed body now rather than when the garbage collector gets to the cycle.
        canonical_root = functions.canonical_root
        functions._last_json = functions.canonical_root = None
    return _build(config, material, validated, prefix, now_ms, context, canonical_root)


def build_invocation(
    config: IdempotencyConfig,
    *,
    material: Any,
    validated: Any,
    prefix: str,
    now_ms: int,
    context: LambdaContextLike | None,
    canonical_root: Any = None,
) -> Invocation | None:
    """Compute the identity from key material already extracted (adapters extract their own).

    ``validated`` is hashed only when the config has a validation expression or the caller
    passes something to validate (not None).

    Raises:
        IdempotencyKeyError: No key material while keys are required, or unhashable material.
    """
    return _build(config, material, validated, prefix, now_ms, context, canonical_root)


def _build(  # noqa: PLR0917 - `build_invocation` without keyword matching, per call
    config: IdempotencyConfig,
    material: Any,
    validated: Any,
    prefix: str,
    now_ms: int,
    context: LambdaContextLike | None,
    canonical_root: Any,
) -> Invocation | None:
    if is_missing(material):
        if config.raise_on_no_idempotency_key:
            raise IdempotencyKeyError("no idempotency key found in the payload")
        return None
    payload_hash = None
    if validated is not None or config._validation_expression is not None:
        payload_hash = _digest(
            config, validated, canonical_root is not None and validated is canonical_root
        )
    remaining = remaining_ms(context)
    lease_ms = remaining if remaining is not None else config.lease_seconds_without_context * 1000
    return Invocation(
        f"{prefix}#{_digest(config, material, material is canonical_root)}",
        payload_hash,
        os.urandom(16).hex(),
        now_ms + lease_ms,
        None if remaining is None else now_ms + remaining,
        now_ms,
        StoreTally(),
    )


def _search(
    expression: CompiledExpression | None, payload: Any, functions: Functions, name: str
) -> Any:
    if expression is None:
        return payload
    try:
        return expression.search_with(payload, functions)
    except Exception as exc:  # JMESPath errors, and bad JSON/base64/gzip met by the built-ins
        raise IdempotencyKeyError(f"{name} could not be evaluated: {type(exc).__name__}") from exc
