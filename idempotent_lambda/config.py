"""`IdempotencyConfig`: how a decorated function derives keys and how long records live."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import jmespath
from jmespath import functions
from jmespath.exceptions import JMESPathError
from jmespath.visitor import TreeInterpreter

from idempotent_lambda._jmespath_functions import with_builtins
from idempotent_lambda._lambda_context import (
    LambdaContextLike,
    as_lambda_context,
    current_lambda_context,
    fallback_context,
    register,
)
from idempotent_lambda._record_format import FORMATS, RecordFormat, RecordFormatName
from idempotent_lambda.exceptions import IdempotencyConfigError, IdempotencyKeyError

if TYPE_CHECKING:
    from idempotent_lambda._observability import Decision
    from idempotent_lambda.record import IdempotencyRecord

DEFAULT_IN_PROGRESS_EXPIRY_SECONDS = 900
"""Lease when no Lambda context is known: Lambda's maximum timeout."""

_Node = dict[str, Any]  # a JMESPath AST node


class Extracted(NamedTuple):
    """What `IdempotencyConfig.extract` found in a payload.

    Attributes:
        key: The key material (see `IdempotencyConfig.key_material`).
        validation: The validation material, None without a validation expression.
    """

    key: Any
    validation: Any


@dataclass(frozen=True, slots=True)
class IdempotencyConfig:
    """Settings of one decorated function; validated and compiled when built.

    The names and defaults match Powertools' ``IdempotencyConfig`` except ``hash_function``, which
    defaults to sha256 here (md5, as in Powertools, with ``record_format="powertools"``). Each
    decorator keeps its own config, even when functions share a store.

    Attributes:
        event_key_jmespath: What in the payload identifies the request; ``""`` = the whole payload.
        payload_validation_jmespath: What must also match when a stored result is replayed.
        jmespath_options: ``{"custom_functions": <jmespath.functions.Functions instance>}``:
            functions the expressions may call besides the built-ins. Subclass
            `IdempotencyFunctions` (Powertools' ``PowertoolsFunctions`` works too) and pass an
            instance; it is used as given and shared by every invocation and thread, so it must
            keep no per-call state. An instance of a plain ``Functions`` subclass is rebuilt once,
            here, as a subclass of both its class and `IdempotencyFunctions`, called without
            arguments; a class that cannot be rebuilt that way is an `IdempotencyConfigError`.
        raise_on_no_idempotency_key: Raise `IdempotencyKeyError` when the key expression finds
            nothing, instead of warning and running without idempotency.
        expires_after_seconds: How long a completed result is replayed.
        use_local_cache: Keep completed records in a per-function, per-process LRU.
        local_cache_max_items: Capacity of that LRU.
        hash_function: Any `hashlib` algorithm name with a fixed digest size; None (the default)
            means the record format's own: sha256 for ``"native"``, md5 for ``"powertools"``.
            `hash_name` says which is used.
        lambda_context: A context to fall back on when none is bound (Powertools compatibility).
        response_hook: ``hook(response, record) -> response``, applied to replays only.
        in_progress_expiry_seconds: Lease of an IN_PROGRESS record when no Lambda context is
            known (default 900 s); with a context the lease is the invocation's remaining time.
        wait_for_in_progress_seconds: When above 0, a duplicate that arrives while the first call
            runs waits up to this long (never past its own remaining time) for the first call's
            result instead of raising `IdempotencyAlreadyInProgressError`. ``math.inf`` means
            "as long as my own claim would last": until the waiter's Lambda deadline, or
            without a context for its own lease (``in_progress_expiry_seconds``).
        decision_hook: Called with every `Decision` (outcome, hashed key, timings): the place to
            count metrics (see `idempotent_lambda.metrics`). Exceptions it raises are logged
            and swallowed.
        logger: Where decision lines go: a `logging.Logger`, or a Powertools ``Logger`` so they
            come out in its structured format with an ``idempotency`` key; by default the
            ``idempotent_lambda`` logger. Powertools is never required.
        record_format: ``"native"`` (this library's format) or ``"powertools"``: read and write
            records exactly as AWS Lambda Powertools 3.x does (key derivation, validation hash,
            status spellings, attributes, result encoding), plus an ``owner`` attribute for
            fencing, so Powertools-decorated copies of a function can share the table during a
            migration. See docs/shared-tables.md for what that format gives up.
    """

    event_key_jmespath: str = ""
    payload_validation_jmespath: str = ""
    jmespath_options: dict[str, Any] | None = None
    raise_on_no_idempotency_key: bool = False
    expires_after_seconds: int = 3600
    use_local_cache: bool = False
    local_cache_max_items: int = 256
    hash_function: str | None = None
    lambda_context: Any = None
    response_hook: Callable[[Any, IdempotencyRecord], Any] | None = None
    in_progress_expiry_seconds: int | None = None
    wait_for_in_progress_seconds: float = 0
    decision_hook: Callable[[Decision], None] | None = None
    logger: Any = None
    record_format: RecordFormatName = "native"

    _key_expression: _Node | None = field(init=False, repr=False, compare=False)
    _validation_expression: _Node | None = field(init=False, repr=False, compare=False)
    _shared_step: tuple[_Node, _Node, _Node] | None = field(init=False, repr=False, compare=False)
    _interpreter: TreeInterpreter = field(init=False, repr=False, compare=False)
    _format: RecordFormat = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "_key_expression", _compile(self.event_key_jmespath, "event_key_jmespath"))
        set_(
            self,
            "_validation_expression",
            _compile(self.payload_validation_jmespath, "payload_validation_jmespath"),
        )
        custom_functions = with_builtins(_custom_functions(self.jmespath_options))
        # One interpreter for every evaluation: `ParsedResult.search` builds a new one per call,
        # and each holds a reference cycle (its method cache) that only the garbage collector
        # frees. It keeps no state between evaluations.
        options = jmespath.Options(custom_functions=custom_functions)
        set_(self, "_interpreter", TreeInterpreter(options))
        known = set(custom_functions.FUNCTION_TABLE)
        for expression, name in (
            (self._key_expression, "event_key_jmespath"),
            (self._validation_expression, "payload_validation_jmespath"),
        ):
            _check_function_names(expression, known, name)
        set_(self, "_shared_step", _shared_step(self._key_expression, self._validation_expression))
        _check_positive_int(self.expires_after_seconds, "expires_after_seconds")
        _check_positive_int(self.local_cache_max_items, "local_cache_max_items")
        if self.in_progress_expiry_seconds is not None:
            _check_positive_int(self.in_progress_expiry_seconds, "in_progress_expiry_seconds")
        wait = self.wait_for_in_progress_seconds
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not wait >= 0:
            raise IdempotencyConfigError("wait_for_in_progress_seconds must be a number >= 0")
        if not (isinstance(self.record_format, str) and self.record_format in FORMATS):
            raise IdempotencyConfigError(
                f"record_format must be one of {sorted(FORMATS)}, got {self.record_format!r}"
            )
        set_(self, "_format", FORMATS[self.record_format])
        if self.hash_function is not None:
            _check_hash_function(self.hash_function)
        for name in ("response_hook", "decision_hook"):
            hook = getattr(self, name)
            if hook is not None and not callable(hook):
                raise IdempotencyConfigError(f"{name} must be callable")
        if self.logger is not None and not all(
            callable(getattr(self.logger, method, None)) for method in ("info", "warning", "error")
        ):
            raise IdempotencyConfigError(
                "logger must be a logging.Logger or a Powertools Logger (info/warning/error)"
            )

    def extract(self, payload: Any) -> Extracted:
        """Return the key and the validation material of ``payload``.

        The same as `key_material` and `validation_material`, except that when both expressions
        start with the same step (``powertools_json(body).order_id`` and
        ``powertools_json(body)``), that step is evaluated once and both go on from its value:
        a large body is parsed once, not twice.

        Raises:
            IdempotencyKeyError: An expression, or a function it calls, failed on ``payload``.
        """
        if self._shared_step is None:
            return Extracted(self.key_material(payload), self.validation_material(payload))
        step, key_rest, validation_rest = self._shared_step
        value = self._evaluate(step, payload, "event_key_jmespath")
        return Extracted(
            self._evaluate(key_rest, value, "event_key_jmespath"),
            self._evaluate(validation_rest, value, "payload_validation_jmespath"),
        )

    def key_material(self, payload: Any) -> Any:
        """Return what identifies ``payload``: ``event_key_jmespath`` on it, else ``payload``.

        Adapters pass their own view of an event (an HTTP event with its body parsed, a raw
        batch record). Whether the material counts as missing is the caller's question.

        Raises:
            IdempotencyKeyError: The expression, or a function it calls, failed on ``payload``.
        """
        if self._key_expression is None:
            return payload
        return self._evaluate(self._key_expression, payload, "event_key_jmespath")

    def validation_material(self, payload: Any) -> Any:
        """Return ``payload_validation_jmespath`` on ``payload``; None when there is none.

        Raises:
            IdempotencyKeyError: The expression, or a function it calls, failed on ``payload``.
        """
        if self._validation_expression is None:
            return None
        return self._evaluate(self._validation_expression, payload, "payload_validation_jmespath")

    def _evaluate(self, expression: _Node, payload: Any, name: str) -> Any:
        try:
            return self._interpreter.visit(cast(Any, expression), payload)  # stubs: a TypedDict
        except Exception as exc:  # JMESPath errors, and bad JSON/base64/gzip met by the built-ins
            raise IdempotencyKeyError(
                f"{name} could not be evaluated: {type(exc).__name__}"
            ) from exc

    def register_lambda_context(self, lambda_context: Any) -> None:
        """Register the invocation's Lambda context for every thread of the process.

        Needed only where no decorated handler binds the context: an `idempotent_function`
        called from an undecorated handler, or from threads such a handler starts (a
        ``ThreadPoolExecutor`` does not carry context variables into its workers). Lambda runs
        one invocation at a time per process, so the registration is process-wide, whichever
        config it is called on, and replaces the previous one; ``None`` forgets it. Call it at
        the start of every invocation: a context whose time has run out is never used (the
        lease falls back to ``in_progress_expiry_seconds``), but one left from an earlier
        invocation that ended early would still be. A context bound by a decorated handler
        wins over the registration. Nothing on the config changes.
        """
        register(lambda_context)

    @property
    def format(self) -> RecordFormat:
        """The record format ``record_format`` names: how keys are hashed and results stored."""
        return self._format

    @property
    def hash_name(self) -> str:
        """The hash function in use: ``hash_function``, else the record format's default."""
        return self.hash_function or self._format.default_hash

    @property
    def lease_seconds_without_context(self) -> int:
        """Lease used when no Lambda context is known."""
        return self.in_progress_expiry_seconds or DEFAULT_IN_PROGRESS_EXPIRY_SECONDS

    def bound_context(self) -> LambdaContextLike | None:
        """Return the context whose remaining time is the lease, if any is known.

        In order: the one bound for this thread or task (by a decorated handler), the
        registered one, the config's ``lambda_context``; the last two only while they have
        time left.
        """
        return as_lambda_context(current_lambda_context.get()) or fallback_context(
            self.lambda_context
        )


def _compile(expression: str, name: str) -> _Node | None:
    if not isinstance(expression, str):
        raise IdempotencyConfigError(f"{name} must be a string")
    if not expression:
        return None
    try:
        return dict(jmespath.compile(expression).parsed)
    except JMESPathError as exc:
        raise IdempotencyConfigError(f"{name} is not valid JMESPath: {exc}") from exc


def _shared_step(key: _Node | None, validation: _Node | None) -> tuple[_Node, _Node, _Node] | None:
    """Return the first step both expressions start with, and what each does after it."""
    if key is None or validation is None:
        return None
    key_step, key_rest = _first_step(key)
    validation_step, validation_rest = _first_step(validation)
    return (key_step, key_rest, validation_rest) if key_step == validation_step else None


def _first_step(node: _Node) -> tuple[_Node, _Node]:
    """Split ``a.b.c`` into ``a`` and ``@.b.c``, the rest as an expression on ``a``'s value."""
    if node["type"] != "subexpression":
        return node, {"type": "current", "children": []}
    step, rest = _first_step(node["children"][0])
    return step, {**node, "children": [rest, *node["children"][1:]]}


def _check_function_names(node: Any, known: set[str], name: str) -> None:
    """Reject calls to functions that do not exist now, rather than on every event."""
    if not isinstance(node, dict):
        return
    if node.get("type") == "function_expression" and node.get("value") not in known:
        raise IdempotencyConfigError(f"{name} calls an unknown function {node.get('value')!r}")
    for child in node.get("children", ()):
        _check_function_names(child, known, name)


def _custom_functions(options: dict[str, Any] | None) -> functions.Functions | None:
    if options is None:
        return None
    if not isinstance(options, dict) or set(options) - {"custom_functions"}:
        raise IdempotencyConfigError(
            'jmespath_options accepts only {"custom_functions": <Functions instance>}'
        )
    custom = options.get("custom_functions")
    if custom is not None and not isinstance(custom, functions.Functions):
        raise IdempotencyConfigError(
            "custom_functions must be an instance of jmespath.functions.Functions"
        )
    return custom


def _check_positive_int(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise IdempotencyConfigError(f"{name} must be a positive integer, got {value!r}")


def _check_hash_function(name: object) -> None:
    if not isinstance(name, str):
        raise IdempotencyConfigError("hash_function must be a hashlib algorithm name")
    try:
        digest = hashlib.new(name)
    except (ValueError, TypeError) as exc:
        raise IdempotencyConfigError(f"hash_function {name!r} is not available") from exc
    if digest.digest_size == 0:
        raise IdempotencyConfigError(f"hash_function {name!r} has no fixed digest size")
