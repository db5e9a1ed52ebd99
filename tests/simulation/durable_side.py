"""Durable executions in the world, through a stand-in ``DurableContext`` (issue 41).

The stand-in has only the SDK's public surface the library reads
(``execution_context.durable_execution_arn``, ``lambda_context``, ``is_replaying()``, ``step``)
and checkpoints by name, shared across the invocations of one execution, as the service would.
A handler decorated with `idempotent` (the execution's claim) runs a `durable.step` (its own
claim) and a durable wait. The service's part is played here: an invocation that suspends (a
wait, or a step's retry after its function raised) is followed by a replay; one that dies (a
crash, its deadline) is invoked again; one whose handler raises an `Exception` fails the
execution. Another execution of the same payload may run meanwhile (in a held request).
"""

from __future__ import annotations

import json
import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from idempotent_lambda import durable, idempotent
from tests.simulation.program import DCall

if TYPE_CHECKING:
    from tests.simulation.world import Env, Invocation, World

#: How many times the stand-in's step retry strategy runs a step whose function raises.
STEP_ATTEMPTS = 2


class Suspend(BaseException):
    """The stand-in's suspension: the invocation ends, the execution goes on (as the SDK's
    ``SuspendExecution``, a `BaseException`, so the library keeps the execution's claim)."""


@dataclass
class Execution:
    """One durable execution: its checkpoints and how it stands."""

    arn: str
    key: str
    checkpoints: dict[str, Any] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    status: str = "new"  # new, pending, succeeded, failed
    live: Invocation | None = None


class StandInContext:
    """The part of ``DurableContext`` the library reads, backed by an `Execution`."""

    def __init__(self, world: World, execution: Execution, lambda_context: Any) -> None:
        self._w = world
        self._execution = execution
        self._replaying = execution.status != "new"
        self.execution_context = types.SimpleNamespace(durable_execution_arn=execution.arn)
        self.lambda_context = lambda_context

    def is_replaying(self) -> bool:
        return self._replaying

    def step(self, func: Any, name: str | None = None, config: Any = None) -> Any:
        """Replay a checkpointed step; run an unfinished one, retrying it by suspending."""
        name = str(name)
        checkpoints = self._execution.checkpoints
        if name in checkpoints:
            return checkpoints[name]
        inv = self._w.stack[-1]
        try:
            result = func(object())
        except Exception:
            if inv.dead:
                raise
            attempts = self._execution.attempts.get(name, 0) + 1
            self._execution.attempts[name] = attempts
            if attempts < STEP_ATTEMPTS:  # the failed attempt is checkpointed; retried later
                self._w.history.add(self._w.clock.now_ms(), inv.name, "suspend", "step retry")
                raise Suspend("a step's retry") from None
            raise
        if not inv.dead:
            checkpoints[name] = result
        return result

    def wait(self, name: str) -> None:
        """A durable wait: the first time, checkpoint it and suspend."""
        if name in self._execution.checkpoints:
            return
        self._execution.checkpoints[name] = None
        inv = self._w.stack[-1]
        self._w.history.add(self._w.clock.now_ms(), inv.name, "suspend", "a durable wait")
        raise Suspend("a durable wait")


class Durable:
    """The durable executions of a run, and the service that invokes them."""

    def __init__(self, world: World) -> None:
        self.w = world
        self.executions: dict[str, Execution] = {}

    def handler(self, env: Env) -> Any:
        if "durable" in env.handlers:
            return env.handlers["durable"]
        world = self.w

        def charge(step_context: Any) -> dict[str, str]:
            inv = world.stack[-1]
            plan = inv.plan
            assert isinstance(plan, DCall)
            hint = f"{plan.key}.charge@{plan.execution}"
            world.body_ran(inv, hint, plan.crash_body, plan.body_ms, group=hint)
            if plan.fail_body:
                world.history.add(world.clock.now_ms(), inv.name, "fail", "the step raises")
                raise RuntimeError("the step failed, as planned")
            return {"charged_by": inv.name}

        def on_order(event: dict[str, Any], context: StandInContext) -> dict[str, Any]:
            inv = world.stack[-1]
            if world.setup.outer:
                world.body_ran(inv, event["k"], False, 0, execution=event["execution"])
            charged = durable.step(
                context, charge, name="charge", persistence_store=env.store, config=world.config()
            )
            if event["wait"]:
                context.wait("pause")
            return {
                "k": event["k"],
                "inv": inv.name,
                "step": f"{event['k']}.charge@{event['execution']}",
                "charged_by": charged["charged_by"],
            }

        handler = on_order
        if world.setup.outer:
            config = world.config(event_key_jmespath="k")
            handler = idempotent(persistence_store=env.store, config=config)(on_order)
        env.handlers["durable"] = handler
        return handler

    def call(self, step: DCall) -> None:
        """The service invokes execution ``step.execution`` (first run, replay or retry)."""
        execution = self.executions.get(step.execution)
        if execution is None:
            arn = f"arn:aws:lambda:us-east-1:123456789012:function:sim/durable/{step.execution}"
            execution = self.executions[step.execution] = Execution(arn, step.key)
        if execution.status in ("succeeded", "failed"):
            return
        live = execution.live
        if live is not None and not live.dead and live.deadline_ms >= self.w.clock.now_ms():
            return  # the service runs one invocation of an execution at a time
        inv = self.w.invoke("dur", step.env, step.faults)
        inv.plan = step
        execution.live = inv
        handler = self.handler(self.w.env(step.env))
        lambda_context = self.w.enter(inv, f"durable {step.execution} {step.key}")
        context = StandInContext(self.w, execution, lambda_context)
        event = {"k": execution.key, "execution": step.execution, "wait": step.wait}
        if execution.status == "new":
            execution.status = "pending"
        status, answer = self._invoke(inv, handler, event, context)
        if status in ("succeeded", "failed"):
            execution.status = status
        self.w.history.add(
            self.w.clock.now_ms(),
            inv.name,
            "durable-end",
            f"{step.execution} {status}",
            execution=step.execution,
            status=status,
        )
        if answer is not None:
            self.w.history.add(
                self.w.clock.now_ms(),
                inv.name,
                "answer",
                json.dumps(answer),
                key=answer["k"],
                **answer,
            )

    def _invoke(
        self, inv: Invocation, handler: Any, event: Any, context: Any
    ) -> tuple[str, dict[str, Any] | None]:
        """Run one invocation as the SDK would; return how it ended and its answer."""
        try:
            answer = handler(event, context)
        except Suspend:
            return ("died" if inv.dead else "suspended"), None
        except Exception as exc:
            if inv.dead:
                return "died", None
            self.w.history.add(
                self.w.clock.now_ms(),
                inv.name,
                "error",
                type(exc).__name__,
                execution=event["execution"],
            )
            return "failed", None
        finally:
            self.w.leave(inv)
        if inv.dead:
            return "died", None
        return "succeeded", answer

    def drain(self) -> None:
        """Invoke every unfinished execution again, fault-free."""
        for name, execution in sorted(self.executions.items()):
            if execution.status == "pending":
                self.call(DCall(env=0, execution=name, key=execution.key))
