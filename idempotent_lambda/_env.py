"""Environment switches, read at call time so tests and operators can flip them live."""

from __future__ import annotations

import os

_TRUTHY = frozenset({"1", "true", "yes", "on", "y", "t"})
DISABLE_VARIABLES = ("IDEMPOTENCY_DISABLED", "POWERTOOLS_IDEMPOTENCY_DISABLED")
# ``os.environ.get`` of an unset name raises and catches a KeyError inside the Mapping machinery:
# microseconds on every invocation. On POSIX the raw bytes mapping answers the same question in
# nanoseconds; it is always current (os.environ writes through to it).
_RAW: dict[bytes, bytes] | None = getattr(os.environ, "_data", None) if os.name == "posix" else None
_RAW_NAMES = tuple(name.encode() for name in DISABLE_VARIABLES)
_FUNCTION_NAME = "AWS_LAMBDA_FUNCTION_NAME"
_RAW_FUNCTION_NAME = _FUNCTION_NAME.encode()
_decoded_names: dict[bytes, str] = {}


def idempotency_disabled() -> bool:
    """Tell whether idempotency is switched off by environment variable."""
    if _RAW is not None:
        for name in _RAW_NAMES:
            value = _RAW.get(name)
            if value is not None and value.decode(errors="replace").strip().lower() in _TRUTHY:
                return True
        return False
    return any(os.environ.get(name, "").strip().lower() in _TRUTHY for name in DISABLE_VARIABLES)


def lambda_function_name() -> str:
    """Return ``AWS_LAMBDA_FUNCTION_NAME``, or ``"local"`` when it is unset or empty."""
    if _RAW is None:
        return os.environ.get(_FUNCTION_NAME) or "local"
    raw = _RAW.get(_RAW_FUNCTION_NAME)
    if not raw:
        return "local"
    name = _decoded_names.get(raw)
    if name is None:
        if len(_decoded_names) > 16:  # the name only changes under tests; stay small anyway
            _decoded_names.clear()
        name = _decoded_names[raw] = os.fsdecode(raw)  # as os.environ decodes it
    return name
