"""The two defects an outside review found by hand, as the simulator writes them: short
programs, each a strict xfail until its fix lands (then it passes, the xfail errors, and the
mark goes). Their shrunk histories are in docs/reliability.md, "The simulator".

Both are fixed on main: grouped completions on a bound that holds, outbox items keyed by a slot
of the claim (DESIGN §14)."""

from __future__ import annotations

from tests.simulation.program import Call, Fault, Poll, Program, Publish, Setup, Tick
from tests.simulation.runner import report, run

#: An SQS batch on a client in botocore's legacy retry mode with lowered timeouts (10 attempts
#: for DynamoDB and uncapped backoff, where main before the fix counted 5): its completion is held
#: past its deadline (as long as botocore's retries allow) while the message comes back after the
#: visibility timeout and another invocation takes the key over.
GROUPED_TAKEOVER = Program(
    0,
    Setup("batch", "powertools", "legacy-fast", 30_000, (0, 0, 0), 1),
    (Poll(0, faults=(Fault("complete#1", "hold", 1_500, True, (Poll(1),)),)),),
)
#: A body emits an event, the publisher publishes it, the record expires, the body runs again.
RERUN_AFTER_EXPIRY = Program(
    0,
    Setup("outbox", "powertools", "library", 60_000, (0, 0, 0), 1, expires_s=60),
    (Call(0, "k1"), Publish(0), Tick(61_500), Call(1, "k1"), Publish(0)),
)


def test_a_grouped_completion_never_lands_on_a_newer_owner(dynamodb_endpoint: str) -> None:
    """The held BatchWriteItem may land after the takeover only if it cannot change the newer
    owner's record."""
    result = run(GROUPED_TAKEOVER, dynamodb_endpoint)
    assert [] == result.violations, report(result, "pytest tests/simulation/test_reproductions.py")


def test_a_rerun_after_expiry_publishes_its_event(dynamodb_endpoint: str) -> None:
    """Both runs' events are published: the rerun's is a new event, not a MODIFY of the old."""
    result = run(RERUN_AFTER_EXPIRY, dynamodb_endpoint)
    assert [] == result.violations, report(result, "pytest tests/simulation/test_reproductions.py")
