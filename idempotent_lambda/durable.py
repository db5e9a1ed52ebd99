"""Durable functions: steps whose side effect runs once per execution, whatever is replayed.

`aws-durable-execution-sdk-python` checkpoints a step's result once the step returns. A step
interrupted after its side effect and before that checkpoint (Lambda stopped, timed out or
crashed) runs again in the next invocation, with either of the SDK's step semantics. `step`
puts a record of ours between the two: the side effect runs under a claim keyed by the durable
execution's ARN and the step's name, its result is stored before the SDK checkpoints it, and a
rerun replays the stored result instead of running the side effect again.

The SDK is needed only by the code that calls `step` (it passes the ``DurableContext``); this
module never imports it. Install it with the extra ``idempotent-lambda[durable]``.
"""

from __future__ import annotations

import contextvars
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from idempotent_lambda._durable_context import durable_run_of
from idempotent_lambda._engine import IdempotentFunction
from idempotent_lambda._entry import Entry, refuse_unrunnable
from idempotent_lambda._grant import check_granted
from idempotent_lambda._identity import Invocation, build_invocation, digest
from idempotent_lambda._lambda_context import LambdaContextLike
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import IdempotencyConfigError, IdempotencyKeyError
from idempotent_lambda.persistence.protocol import PersistenceStore
from idempotent_lambda.serialization import NoOpSerializer

T = TypeVar("T")

__all__ = ["step", "step_key"]

_running_key: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "idempotent_lambda_durable_step_key", default=None
)
# DurableContext -> the step names it has run in this invocation. The handler runs from the top
# in every invocation, with a new context, so the names it meets are the same each time.
_names_seen: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()
_names_lock = threading.Lock()


def step(
    context: Any,
    func: Callable[[Any], T],
    *,
    name: str,
    persistence_store: PersistenceStore,
    config: IdempotencyConfig | None = None,
    payload: Any = None,
    step_config: Any = None,
    key_prefix: str | None = None,
) -> T:
    """Run ``context.step(func, name=name)`` with ``func``'s side effect at most once.

    The record's key is the durable execution's ARN and ``name``, so it is the same in every
    invocation of the execution and different in every other execution. A completed record is
    replayed instead of running ``func`` (the SDK then checkpoints that result); ``func``
    raising releases the record, so the SDK's retry strategy runs it again as it would without
    us. While ``func`` runs, `step_key` returns the key, to pass downstream as that API's own
    idempotency key.

    Args:
        context: The ``DurableContext`` the ``@durable_execution`` handler was given (or
            anything with its ``execution_context.durable_execution_arn`` and ``step``).
        func: The step's function; it receives the SDK's step context.
        name: The step's name: unique within the execution.
        persistence_store: Where records live.
        config: Validation, expiry, waiting and record-format settings. Its
            ``event_key_jmespath`` must be empty: the key is the execution and the step.
        payload: The step's inputs, when a rerun must be refused for other inputs: hashed
            (through ``payload_validation_jmespath`` when set) and checked on replay.
        step_config: The SDK's ``StepConfig`` (retry strategy, semantics), passed on as is.
        key_prefix: Replaces the default prefix ``"{function name}.idempotent_lambda.durable"``.

    Returns:
        What ``func`` returned, or the stored result of the run that already happened.

    Raises:
        IdempotencyConfigError: ``context`` is not a durable context, an argument is not
            usable, or ``name`` was already used in this execution's context.
        IdempotencyAlreadyInProgressError: Another invocation is running this step now.
        IdempotencyValidationError: ``payload`` differs from the one the step first ran with.
        IdempotencyKeyPrefixNotGrantedError: The CDK construct granted the function other key
            prefixes than the step's (`key_prefix`, or the default one).
    """
    run = durable_run_of(context)
    if run is None or not callable(getattr(context, "step", None)):
        raise IdempotencyConfigError(
            "idempotent_lambda.durable.step needs the DurableContext of a @durable_execution "
            "handler (execution_context.durable_execution_arn and step)"
        )
    if not isinstance(name, str) or not name:
        raise IdempotencyConfigError("a durable step needs a non-empty name: it is the key")
    entry = Entry(persistence_store, config, key_prefix)
    settings = entry.config
    if settings.event_key_jmespath:
        raise IdempotencyConfigError(
            "a durable step's key is its execution and name: leave event_key_jmespath empty "
            "(pass payload= to validate the step's inputs)"
        )
    prefix = key_prefix or f"{settings.format.function_name()}.idempotent_lambda.durable"
    check_granted(prefix)
    refuse_unrunnable(func)
    _claim_name(context, name)
    material = {"execution": run.arn, "step": name}
    key = f"{prefix}#{digest(settings, material)}"
    validated = _validation_material(settings, payload)
    clock = entry.store.clock
    engine = IdempotentFunction(
        store=entry.store,
        config=settings,
        function_name=f"durable step {name}",
        serializer=NoOpSerializer(),
        execution=run.arn,
    )

    def derive(lease: LambdaContextLike | None) -> Invocation | None:
        return build_invocation(
            settings,
            material=material,
            validated=validated,
            prefix=prefix,
            now_ms=clock.now_ms(),
            context=lease,
        )

    def run_once(step_context: Any) -> T:
        token = _running_key.set(key)
        try:
            return engine.call(run.lambda_context, derive, lambda: func(step_context))
        finally:
            _running_key.reset(token)

    result: T = context.step(run_once, name=name, config=step_config)
    return result


def step_key() -> str:
    """Return the idempotency key of the durable step running now, inside its function.

    Stable across every rerun of the step in its execution and unique to it: give it to the
    downstream API as that call's own idempotency key, so a crash in the middle of the call
    (the one window no record can close) is deduplicated there.

    Raises:
        IdempotencyConfigError: No `step` is running in this thread or task.
    """
    key = _running_key.get()
    if key is None:
        raise IdempotencyConfigError(
            "step_key() is readable only inside a function run by idempotent_lambda.durable.step"
        )
    return key


def _claim_name(context: Any, name: str) -> None:
    """Refuse a second step named ``name`` in ``context``: both would share one record."""
    with _names_lock:
        try:
            seen = _names_seen.setdefault(context, set())
        except TypeError:  # a context that cannot be weakly referenced is not checked
            return
        if name in seen:
            raise IdempotencyConfigError(
                f"two durable steps are named {name!r} in one execution: the second would "
                "replay the first one's result; give each step its own name (a loop or a "
                "parallel branch can add its item's id)"
            )
        seen.add(name)


def _validation_material(config: IdempotencyConfig, payload: Any) -> Any:
    """Return what is hashed to validate a step's inputs; None when there are none."""
    if payload is None:
        return None
    try:
        plain = config.format.prepare(payload)
    except (TypeError, ValueError, RecursionError) as exc:
        raise IdempotencyKeyError(
            f"the step's payload has no JSON form to validate: {type(exc).__name__}"
        ) from exc
    if config.payload_validation_jmespath:
        return config.validation_material(plain)
    return plain
