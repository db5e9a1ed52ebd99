"""Durable functions: steps whose side effect runs once per execution, whatever is replayed.

`aws-durable-execution-sdk-python` checkpoints a step's result once the step returns. A step
interrupted after its side effect and before that checkpoint (Lambda stopped, timed out or
crashed) runs again in the next invocation, with either of the SDK's step semantics. `step`
puts a record of ours between the two: the side effect runs under a claim keyed by the step's
place in the durable execution, its result is stored before the SDK checkpoints it, and a rerun
replays the stored result instead of running the side effect again.

The SDK is needed only by the code that calls `step` (it passes the ``DurableContext``) or
registers `ClaimsPlugin`; this module imports it only when the plugin serves an invocation.
Install it with the extra ``idempotent-lambda[durable]``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import math
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

from idempotent_lambda._durable_context import (
    durable_run_of,
    enter_durable,
    leave_durable,
    start_holding,
    stop_holding,
)
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
P = ParamSpec("P")

__all__ = ["BoundStep", "ClaimsPlugin", "idempotent_step", "step", "step_key"]

#: The name of the one SDK step per context that draws the context's identity (`_place`).
SCOPE_STEP_NAME = "idempotent_lambda.scope"

_running_key: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "idempotent_lambda_durable_step_key", default=None
)
# DurableContext -> its identity and the steps it has run in this invocation, by name. The
# handler runs from the top in every invocation, with new contexts, and meets them in the same
# order each time.
_scopes: weakref.WeakKeyDictionary[Any, tuple[str, dict[str, int]]] = weakref.WeakKeyDictionary()
_scopes_lock = threading.Lock()
#: Called with the step's name once its record is completed, before the SDK checkpoints it:
#: `idempotent_lambda.testing.durable.stop_after_step` stops the invocation there.
after_record: list[Callable[[str], None]] = []


def step(
    context: Any,
    func: Callable[[Any], T],
    *,
    name: str | None = None,
    persistence_store: PersistenceStore | None = None,
    config: IdempotencyConfig | None = None,
    payload: Any = None,
    step_config: Any = None,
    key_prefix: str | None = None,
) -> T:
    """Run ``context.step(func, name=name)`` with ``func``'s side effect at most once.

    The record's key is the step's place in the durable execution: its execution's ARN, the
    identity of the ``DurableContext`` it runs in (drawn once per context by an SDK step named
    `SCOPE_STEP_NAME` and checkpointed, so every replay reads the same), its ``name`` and how
    many steps of that name the context ran before it. So the same code in every branch of
    ``map``, ``parallel`` or ``run_in_child_context``, or in a loop, gets a record per branch and
    per turn, and the same record in every invocation of the execution. A completed record is
    replayed instead of running ``func`` (the SDK then checkpoints that result); ``func`` raising
    releases the record, so the SDK's retry strategy runs it again as it would without us. While
    ``func`` runs, `step_key` returns the key, to pass downstream as that API's own idempotency
    key.

    Args:
        context: The ``DurableContext`` the ``@durable_execution`` handler (or a branch) was
            given, or anything with its ``execution_context.durable_execution_arn`` and ``step``.
        func: The step's function; it receives the SDK's step context. A `BoundStep` (made by
            `idempotent_step`) brings its own name, store and settings.
        name: The step's name (default: a `BoundStep`'s function name).
        persistence_store: Where records live (default: a `BoundStep`'s store).
        config: Validation, expiry, waiting and record-format settings. Its
            ``event_key_jmespath`` must be empty: the key is the step's place. A step waits for
            an earlier invocation's claim as long as its own invocation can, unless
            ``wait_for_in_progress_seconds`` sets a budget.
        payload: The step's inputs, when a rerun must be refused for other inputs: hashed
            (through ``payload_validation_jmespath`` when set) and checked on replay.
        step_config: The SDK's ``StepConfig`` (retry strategy, semantics), passed on as is.
        key_prefix: Replaces the default prefix ``"{function name}.idempotent_lambda.durable"``.

    Returns:
        What ``func`` returned as a replay returns it (decoded from its stored form, so a
        replay compares equal to the first run), or the stored result of the run that already
        happened.

    Raises:
        IdempotencyConfigError: ``context`` is not a durable context, or an argument is not
            usable (no name, no store).
        IdempotencyAlreadyInProgressError: Another invocation held this step past this one's
            own deadline.
        IdempotencyValidationError: ``payload`` differs from the one the step first ran with.
        IdempotencyKeyPrefixNotGrantedError: The CDK construct granted the function other key
            prefixes than the step's (`key_prefix`, or the default one).
    """
    if isinstance(func, BoundStep):
        name = func.name if name is None else name
        persistence_store = (
            func.persistence_store if persistence_store is None else persistence_store
        )
        config = func.config if config is None else config
        key_prefix = func.key_prefix if key_prefix is None else key_prefix
        step_config = func.step_config if step_config is None else step_config
    run = durable_run_of(context)
    if run is None or not callable(getattr(context, "step", None)):
        raise IdempotencyConfigError(
            "idempotent_lambda.durable.step needs the DurableContext of a @durable_execution "
            "handler (execution_context.durable_execution_arn and step)"
        )
    if not isinstance(name, str) or not name:
        raise IdempotencyConfigError("a durable step needs a non-empty name")
    if persistence_store is None:
        raise IdempotencyConfigError(
            "a durable step needs a persistence_store (or a function made by idempotent_step)"
        )
    entry = Entry(persistence_store, config, key_prefix)
    settings = entry.config
    if settings.event_key_jmespath:
        raise IdempotencyConfigError(
            "a durable step's key is its place in the execution: leave event_key_jmespath "
            "empty (pass payload= to validate the step's inputs)"
        )
    if not settings.wait_for_in_progress_seconds:  # see docs/durable.md, "After a crash"
        settings = dataclasses.replace(settings, wait_for_in_progress_seconds=math.inf)
    prefix = key_prefix or f"{settings.format.function_name()}.idempotent_lambda.durable"
    check_granted(prefix)
    refuse_unrunnable(func)
    scope, turn = _place(context, name)
    material = {"execution": run.arn, "scope": scope, "step": name, "turn": turn}
    key = f"{prefix}#{digest(settings, material)}"
    validated = _validation_material(settings, payload)
    clock = entry.store.clock
    engine = IdempotentFunction(
        store=entry.view(),
        config=settings,
        function_name=f"durable step {name}",
        serializer=NoOpSerializer(),
        execution=run.arn,
        key_prefix=lambda: prefix,
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
        scope_token = enter_durable(context)
        try:
            result = engine.call(run.lambda_context, derive, lambda: func(step_context))
        finally:
            leave_durable(scope_token)
            _running_key.reset(token)
        for hook in after_record:
            hook(name)
        return result

    result: T = context.step(run_once, name=name, config=step_config)
    return result


@dataclasses.dataclass(slots=True, eq=False)
class BoundStep(Generic[T]):
    """A step function with its arguments, name, store and settings: what `step` runs.

    Made by calling a function decorated with `idempotent_step`; pass it to `step`, where its
    settings are the defaults that `step`'s own arguments override.
    """

    _call: Callable[[Any], T]
    name: str
    persistence_store: PersistenceStore
    config: IdempotencyConfig | None
    key_prefix: str | None
    step_config: Any

    def __call__(self, step_context: Any) -> T:
        """Run the function with the SDK's step context and the bound arguments."""
        return self._call(step_context)


def idempotent_step(
    *,
    persistence_store: PersistenceStore,
    config: IdempotencyConfig | None = None,
    key_prefix: str | None = None,
    step_config: Any = None,
    name: str | None = None,
) -> Callable[[Callable[Concatenate[Any, P], T]], Callable[P, BoundStep[T]]]:
    """Decorate a step function once with its store, as the SDK's ``@durable_step`` names it.

    The decorated function takes the SDK's step context first, then its own arguments. Called
    with those arguments it returns a `BoundStep`, which `step` runs:

        @idempotent_step(persistence_store=store)
        def charge(step_context, order_id, amount): ...

        receipt = step(context, charge(order_id, amount))

    Args:
        persistence_store: Where the step's records live.
        config: Its settings (see `step`).
        key_prefix: Replaces the default key prefix (see `step`).
        step_config: The SDK's ``StepConfig`` for every call.
        name: The step's name (default: the function's ``__name__``).

    Raises:
        IdempotencyConfigError: ``persistence_store`` or ``config`` is not usable.
    """
    Entry(persistence_store, config, key_prefix)  # refuse bad settings at import time

    def decorate(func: Callable[Concatenate[Any, P], T]) -> Callable[P, BoundStep[T]]:
        step_name = name or getattr(func, "__name__", None) or "step"

        def bind(*args: P.args, **kwargs: P.kwargs) -> BoundStep[T]:
            return BoundStep(
                lambda step_context: func(step_context, *args, **kwargs),
                step_name,
                persistence_store,
                config,
                key_prefix,
                step_config,
            )

        bind.__name__ = step_name
        bind.__qualname__ = getattr(func, "__qualname__", step_name)
        bind.__doc__ = func.__doc__
        return bind

    return decorate


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


class ClaimsPlugin:
    """Keep a durable claim until the SDK's final answer says the execution is over.

    A plugin factory for ``@durable_execution(plugins=[ClaimsPlugin()])`` (the class itself
    works too), also found through the SDK's ``aws_durable_execution.plugins`` entry point as
    ``idempotent_lambda.claims``, which ``DURABLE_EXECUTION_PLUGINS=idempotent_lambda.claims``
    selects. Without it, a claim of the execution (``@idempotent`` given the handler's
    ``DurableContext``) whose body raised an error that ends the execution is released at once.
    The SDK may still answer such an invocation with PENDING instead of FAILED, when
    it learns only while it closes the invocation that its checkpoint token was revoked; the
    execution then goes on and the claim should have stayed. With it registered, that release
    waits for the invocation's end: it happens when the final status is FAILED (or SUCCEEDED,
    the handler having caught the error), and the claim is kept when it is PENDING or RETRY.
    The Durable functions page of the docs shows both ways to register it.
    """

    @classmethod
    def create_plugin(cls, info: Any, /) -> Any:
        """Return the plugin that serves one invocation; the SDK calls it once per invocation."""
        return _held_claims_type()()


@functools.cache
def _held_claims_type() -> type[Any]:
    """Return the SDK plugin class behind `ClaimsPlugin`, importing the SDK the first time."""
    from aws_durable_execution_sdk_python.plugin import (
        DurableInstrumentationPlugin,
        InvocationEndInfo,
        InvocationStartInfo,
        InvocationStatus,
    )

    over = {InvocationStatus.FAILED, InvocationStatus.SUCCEEDED}

    class HeldClaims(DurableInstrumentationPlugin):
        """Holds this invocation's releases from its start, settles them at its end."""

        def __init__(self) -> None:
            self.token: Any = None

        def on_invocation_start(self, info: InvocationStartInfo) -> None:
            self.token = start_holding()  # the SDK keeps a hook's context for the handler

        def on_invocation_end(self, info: InvocationEndInfo) -> None:
            if self.token is None:
                return
            held, self.token = stop_holding(self.token), None
            ends = info.status in over
            for settle in held:
                settle(ends)

    return HeldClaims


def _place(context: Any, name: str) -> tuple[str, int]:
    """Return the identity of ``context`` and how many steps named ``name`` it ran before.

    The identity is drawn by an SDK step the first time ``context`` runs one of ours, so the
    SDK checkpoints it before any side effect and every replay reads the same value: it differs
    in each branch and child context (each has its own operation ids) and never changes. A
    context that cannot be weakly referenced draws it on every call.
    """
    with _scopes_lock:
        try:
            known = _scopes.get(context)
        except TypeError:
            known = None
    if known is None:
        scope: str = context.step(_draw_scope, name=SCOPE_STEP_NAME)
        known = (scope, {})
        with _scopes_lock, contextlib.suppress(TypeError):
            known = _scopes.setdefault(context, known)
    with _scopes_lock:
        turns = known[1]
        turn = turns.get(name, 0)
        turns[name] = turn + 1
    return known[0], turn


def _draw_scope(_step_context: Any) -> str:
    return os.urandom(16).hex()


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
