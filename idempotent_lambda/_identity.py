"""An invocation's identity: key, validation hash, owner token and lease, computed once."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from typing import Any, NamedTuple

from idempotent_lambda._lambda_context import LambdaContextLike, remaining_ms
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import IdempotencyKeyError

_CONTAINERS = (list, tuple, dict, set, frozenset)

#: Owner tokens: 80 random bits drawn once per process (again in a forked child), then a
#: counter. Unique like a fresh random token, without a getrandom call per invocation (about
#: 0.1 ms of CPU in some sandboxes, a tenth of a DynamoDB request's).
_OWNER_PREFIX = [os.urandom(10).hex()]
_OWNER_COUNTER = itertools.count()


def _new_process() -> None:
    _OWNER_PREFIX[0] = os.urandom(10).hex()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_new_process)


def new_owner() -> str:
    """Return an owner token no other invocation, in this process or any other, holds."""
    return f"{_OWNER_PREFIX[0]}{next(_OWNER_COUNTER):012x}"


class Invocation(NamedTuple):
    """Who this invocation is, as every store call needs it: an immutable value, built per call.

    Attributes:
        key: ``"{prefix}#{hexdigest}"``.
        payload_hash: Hex digest of the validated part of the payload, or None.
        owner: Unique token fencing this invocation's claim (`new_owner`).
            None once it adopted an unowned (Powertools) claim.
        lease_end_ms: When this invocation's claim stops protecting it.
        deadline_ms: When the invocation itself must be done (Lambda's deadline), if known.
        now_ms: The store clock's reading the identity was derived at (the first claim's time).
        adopts_unowned: A live IN_PROGRESS record without an owner is this invocation's own: a
            durable execution's replay meeting the claim that Powertools took for it.
    """

    key: str
    payload_hash: str | None
    owner: str | None
    lease_end_ms: int
    deadline_ms: int | None
    now_ms: int
    adopts_unowned: bool = False

    def expiry_seconds(self, now_ms: int, expires_after_seconds: int) -> int:
        """Return the record expiration for a write at ``now_ms``, never before the lease ends."""
        return max(now_ms // 1000 + expires_after_seconds, -(-self.lease_end_ms // 1000))


Derive = Callable[[LambdaContextLike | None], Invocation | None]
"""Computes one call's identity, given the context whose remaining time is the lease.

None when the payload holds no key material; raises `IdempotencyKeyError` (or an adapter's own
rejection) when the key cannot be read.
"""


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


def key_source_of(config: IdempotencyConfig) -> str:
    """Name what reads the key from a payload, for messages about a key it did not find."""
    expression = config.event_key_jmespath
    return f"event_key_jmespath {expression!r}" if expression else "the whole payload"


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
        IdempotencyKeyError: No key material while keys are required (the message names
            `key_source_of`), or unhashable material.
    """
    if is_missing(material):
        if config.raise_on_no_idempotency_key:
            raise IdempotencyKeyError(
                f"no idempotency key found in the payload: {key_source_of(config)} found nothing "
                "(None, an empty string, or a container that is empty or holds only None)"
            )
        return None
    payload_hash = None
    if validated is not None or config.payload_validation_jmespath:
        payload_hash = digest(config, validated)
    remaining = remaining_ms(context)
    lease_ms = remaining if remaining is not None else config.lease_seconds_without_context * 1000
    return Invocation(
        key=f"{prefix}#{digest(config, material)}",
        payload_hash=payload_hash,
        owner=new_owner(),
        lease_end_ms=now_ms + lease_ms,
        deadline_ms=None if remaining is None else now_ms + remaining,
        now_ms=now_ms,
    )
