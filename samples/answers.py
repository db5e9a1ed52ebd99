"""What CreateOrder's answers mean: every answer the demo counts is explained, and checked.

`ANSWERS` names each kind of answer the scenario's requests get, as the client sees it (status,
`Idempotent-Replayed`, problem title). `expect_duplicates` checks the concurrent duplicates of
step 1 against the library's decisions; `explain_answers` prints the summary's account of every
answer and fails a check for any it cannot explain.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from samples.local_app import Response
    from samples.watchers import Transcript


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of answer: its status, what it means, and whether the handler ran for it."""

    status: int
    meaning: str
    ran: bool
    replayed: bool = False


CREATED = Kind(201, "a new order: the handler ran; order and record committed together", True)
REPLAYED = Kind(
    201, "the stored 201 replayed (Idempotent-Replayed): the handler did not run", False, True
)
OUTSTANDING = Kind(409, "the same key still running: refused, with Retry-After", False)

#: Every kind of answer, by (status, replayed, problem title).
ANSWERS: dict[tuple[int, bool, str | None], Kind] = {
    (201, False, None): CREATED,
    (201, True, None): REPLAYED,
    (400, False, "Invalid order"): Kind(
        400, "an invalid body: the handler ran and refused it (stored, like any 400)", True
    ),
    (400, True, "Invalid order"): Kind(400, "the stored 400 replayed", False, True),
    (400, False, "Idempotency-Key is missing"): Kind(
        400, "no Idempotency-Key: refused before the handler", False
    ),
    (409, False, "A request is outstanding for this Idempotency-Key"): OUTSTANDING,
    (409, False, "Conflict"): Kind(
        409, "the handler ran, but the order existed: nothing written, nothing stored", True
    ),
    (422, False, "Idempotency-Key is already used"): Kind(
        422, "the key reused with another body: refused", False
    ),
    (500, False, None): Kind(
        500,
        "the handler ran, its commit failed: the invocation failed (API Gateway's 500)",
        True,
    ),
}


def kind_of(response: Response) -> Kind | None:
    """Return what `response` means; None when it is no kind the demo knows."""
    body = response.body
    title = body.get("title") if response.status >= 400 and isinstance(body, dict) else None
    replayed = response.headers.get("idempotent-replayed") == "true"
    return ANSWERS.get((response.status, replayed, title))


def expect_duplicates(
    t: Transcript,
    concurrent: Sequence[Response],
    late: Response,
    *,
    replays: int,
    refusals: int,
) -> None:
    """Check the answers to concurrent duplicates and to one more sent after they all answered.

    Args:
        t: Where the checks go.
        concurrent: The answers to the duplicates sent at once.
        late: The answer to the same request sent after them: the first had finished.
        replays: REPLAYED decisions the library made meanwhile.
        refusals: In-progress refusals (IN_PROGRESS decisions) it made meanwhile.
    """
    answers = [*concurrent, late]
    created = [r for r in answers if kind_of(r) is CREATED]
    replayed = [r for r in answers if kind_of(r) is REPLAYED]
    waiting = [
        r
        for r in answers
        if kind_of(r) is OUTSTANDING and int(r.headers.get("retry-after", "0")) >= 1
    ]
    t.expect(
        "every 201 carries the same order",
        len({json.dumps(r.body, sort_keys=True) for r in created + replayed}) == 1,
    )
    t.expect("the retry sent after they all answered replayed the 201", kind_of(late) is REPLAYED)
    t.expect(
        f"one 201 ran the handler, {len(replayed)} more are replays: one per REPLAYED "
        f"decision ({replays})",
        len(created) == 1 and len(replayed) >= 1 and len(replayed) == replays,
    )
    t.expect(
        f"{len(waiting)} got 409 with Retry-After: one per in-progress refusal ({refusals}), "
        "and no other answer",
        len(waiting) == refusals and len(created) + len(replayed) + len(waiting) == len(answers),
    )


def explain_answers(t: Transcript, function: str, answers: Sequence[Response]) -> None:
    """Print how many answers of each kind `function` gave and what each means; check all are."""
    counts = Counter(kind_of(r) for r in answers)
    unknown = [r.status for r in answers if kind_of(r) is None]
    t.note(f"{function} answered {len(answers)} requests:")
    for kind, n in sorted(
        ((k, n) for k, n in counts.items() if k is not None), key=lambda item: item[0].status
    ):
        t.note(f"   {kind.status} x {n:<3} {kind.meaning}")
    if unknown:
        t.note(f"   not explained: {sorted(unknown)}")
    ran = sum(n for k, n in counts.items() if k is not None and k.ran)
    replayed = sum(n for k, n in counts.items() if k is not None and k.replayed)
    refused = len(answers) - len(unknown) - ran - replayed
    t.expect(
        f"every answer is explained: {len(answers)} = {ran} ran + {replayed} replayed + "
        f"{refused} refused before the handler",
        not unknown,
    )
