"""The contract's invariants, tested on a `history.History` (issue 41, "A history and a checker").

Each check returns the violations it finds, as short sentences naming labels of the history.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from idempotent_lambda._claim import CLOCK_SKEW_TOLERANCE_MS
from idempotent_lambda._outbox_format import PUBLISHED_AT
from tests.simulation.history import Entry, History, Write


@dataclass(frozen=True)
class Violation:
    """One broken invariant."""

    invariant: str
    text: str

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.text}"


def check(history: History) -> list[Violation]:
    """Return every violation of every invariant."""
    found: list[Violation] = []
    for invariant in INVARIANTS:
        found.extend(invariant(history))
    return found


def _applied(history: History) -> list[tuple[Entry, Write]]:
    return [(e, e.data["write"]) for e in history.of("applied")]


def takeover_fenced(history: History) -> list[Violation]:
    """A writer whose lease was taken over never changes the newer owner's record."""
    out = []
    for entry, write in _applied(history):
        if write.op not in ("complete", "release", "update") or write.before is None:
            continue
        owner = history.owner_label(write.key, write.owner)
        before_owner = _owner(write.before)
        if before_owner is not None and write.owner is not None and before_owner != write.owner:
            newer = history.owner_label(write.key, before_owner)
            out.append(
                Violation(
                    "takeover-fenced",
                    f"{entry.inv}'s {write.op} as {owner} changed {newer}'s record of "
                    f"{history.key_label(write.key)} at t={_t(history, entry)}",
                )
            )
    return out


def reruns_explained(history: History) -> list[Violation]:
    """A body runs again for a key only after an earlier run's lease ended without a durable
    completion, after it failed, or after its completed record expired."""
    out = []
    runs: dict[str, list[Entry]] = {}
    completions: dict[str, list[tuple[Entry, Write]]] = {}
    releases: dict[str, list[Entry]] = {}
    events = [e for e in history.entries if e.kind in ("run", "applied")]
    for entry in events:
        if entry.kind == "applied":
            write: Write = entry.data["write"]
            if write.op == "complete" and write.after is not None:
                completions.setdefault(write.owner or "", []).append((entry, write))
            if write.op == "release" and write.after is None:
                releases.setdefault(write.owner or "", []).append(entry)
            continue
        key = entry.data.get("key")
        if key is None:
            continue
        group = entry.data.get("group") or key  # a durable step: its place in the execution
        for earlier in runs.get(group, []):
            if entry.data.get("execution") and earlier.data.get("owner") == entry.data["owner"]:
                continue  # an execution's replay runs its handler again under its own claim
            reason = _explained(earlier, entry, completions, releases)
            if reason is not None:
                out.append(
                    Violation(
                        "reruns-explained",
                        f"{entry.inv} ran {history.key_label(key)} at t={_t(history, entry)} "
                        f"while {earlier.inv}'s run {reason}",
                    )
                )
        runs.setdefault(group, []).append(entry)
    return out


def _explained(
    earlier: Entry,
    later: Entry,
    completions: dict[str, list[tuple[Entry, Write]]],
    releases: dict[str, list[Entry]],
) -> str | None:
    """Return why ``later`` may not have run, or None when the history explains it."""
    owner = earlier.data.get("owner") or ""
    if releases.get(owner):
        return None
    done = completions.get(owner, [])
    if done:
        expiry_s = _number(done[-1][1].after, "expiration")
        if expiry_s is not None and later.t_ms >= expiry_s * 1000 - CLOCK_SKEW_TOLERANCE_MS:
            return None
        return "was completed and its record had not expired"
    if later.t_ms >= earlier.data["deadline_ms"]:
        return None
    return "was still within its lease"


def answers_match(history: History) -> list[Violation]:
    """Every answer is the answer of a completed run of the same key, not a superseded one."""
    out = []
    durable: dict[str, str] = {}  # key label -> the invocation whose completion is current
    said: set[tuple[str, str]] = set()  # (key label, invocation) whose completion failed
    run_inv: dict[str | None, str] = {}
    for entry in history.entries:
        if entry.kind == "run" and entry.data.get("owner"):
            run_inv[entry.data["owner"]] = entry.inv
        elif entry.kind == "applied":
            write: Write = entry.data["write"]
            if write.op == "complete" and write.after is not None:
                durable[history.readable(history.key_label(write.key))] = run_inv.get(
                    write.owner, "?"
                )
        elif entry.kind == "decide" and entry.data["outcome"] == "COMPLETE_FAILED":
            # The run's result goes back to its caller (docs/concepts.md), a durable step's
            # into its execution's checkpoint: its own answer, not a replay.
            said.add((history.readable(history.key_label(entry.data["key"])), entry.inv))
        elif entry.kind == "answer" and "inv" in entry.data and "k" in entry.data:
            key, by = entry.data["k"], entry.data["inv"]
            step, charged_by = entry.data.get("step"), entry.data.get("charged_by")
            if (
                step is not None
                and durable.get(step) != charged_by
                and (step, charged_by) not in said
            ):
                out.append(
                    Violation(
                        "answers-match",
                        f"{entry.inv}'s answer carries {charged_by}'s result of {step}, whose "
                        f"current completed run is {durable.get(step)}",
                    )
                )
            if entry.data.get("key") != key:
                out.append(Violation("answers-match", f"{entry.inv} answered with {key}'s result"))
            elif by != entry.inv and durable.get(key) != by:
                out.append(
                    Violation(
                        "answers-match",
                        f"{entry.inv} replayed {by}'s answer for {key}, whose current "
                        f"completed run is {durable.get(key)}",
                    )
                )
    return out


def batch_done_durable(history: History) -> list[Violation]:
    """A batch reports a record done only once its completion is settled: durable, or failed
    and reported (COMPLETE_FAILED), or the record was already complete (a replay)."""
    out = []
    settled: set[str] = set()
    keys: dict[str, str] = {}  # message id -> key label
    for entry in history.entries:
        if entry.kind == "run" and entry.data.get("key"):
            keys[entry.data["hint"]] = history.key_label(entry.data["key"])
        elif entry.kind == "applied":
            write: Write = entry.data["write"]
            if write.op == "complete" and write.after is not None:
                settled.add(history.key_label(write.key))
        elif entry.kind == "decide" and entry.data["outcome"] in (
            "COMPLETE_FAILED",
            "LEASE_LOST",
            "UNSTORABLE",
        ):
            settled.add(history.key_label(entry.data["key"]))  # failed, and said so
        elif entry.kind == "answer" and "done" in entry.data:
            for message in entry.data["done"]:
                if keys.get(message) not in settled:
                    out.append(
                        Violation(
                            "batch-done-durable",
                            f"{entry.inv} reported {message} done with no completion written",
                        )
                    )
    return out


def outbox_published(history: History) -> list[Violation]:
    """Every event committed with a completed record is published at least once; no event
    of a body whose commit failed is ever published; the consumer applies each event, once
    unless an application's completion was lost (its runs are checked as any key's are)."""
    out = []
    committed: dict[tuple[str, str], str] = {}  # (event id, emitting invocation) -> key label
    for _, write in _applied(history):
        if write.op == "outbox" and write.after is not None:
            detail = json.loads(write.after["outbox_detail"]["S"])
            committed[(write.after["outbox_id"]["S"], detail["inv"])] = detail["k"]
    published = {(e.data["event_id"], e.data["by"]) for e in history.of("publish")}
    for (event_id, by), key in committed.items():
        if (event_id, by) not in published:
            out.append(
                Violation(
                    "outbox-published",
                    f"the event {event_id[:8]} that {by} committed for {key} was never published",
                )
            )
    for event_id, by in sorted(published - set(committed)):
        out.append(
            Violation("outbox-published", f"{by}'s event {event_id[:8]} published uncommitted")
        )
    applied: dict[str, int] = {}
    for entry in history.of("apply"):
        applied[entry.data["event_id"]] = applied.get(entry.data["event_id"], 0) + 1
    for event_id in {e for e, _ in published}:
        if not applied.get(event_id):  # more than once only as `reruns_explained` allows
            out.append(Violation("outbox-consumed", f"the consumer never applied {event_id[:8]}"))
    return out


def stored_results_match(history: History) -> list[Violation]:
    """A completed record's stored result (its S3 object resolved) is the result of the run
    that completed it: read back at the end of a run whose results are offloaded."""
    run_inv = {e.data["owner"]: e.inv for e in history.of("run") if e.data.get("owner")}
    out = []
    for entry in history.of("audit"):
        result = entry.data["result"]
        by = run_inv.get(entry.data["owner"])
        if not isinstance(result, dict) or result.get("inv") != by:
            label = history.key_label(entry.data["key"])
            out.append(
                Violation("stored-results-match", f"{label}, completed by {by}, holds {result}")
            )
    return out


def outbox_marked_once(history: History) -> list[Violation]:
    """The published mark is written once, on a live item: it never re-creates an item that
    is gone (TTL-deleted) and never moves an earlier mark (its time starts the item's last day).
    """
    out = []
    for entry, write in _applied(history):
        if write.op != "mark":
            continue
        if write.before is None:
            what = "re-created the item of an event that was gone"
        elif PUBLISHED_AT in write.before:
            what = "marked an event published again"
        else:
            continue
        label = history.key_label(write.key)
        out.append(Violation("outbox-marked-once", f"{entry.inv} {what} ({label})"))
    return out


def durable_claim_kept(history: History) -> list[Violation]:
    """A durable execution's claim is released only by an invocation that failed the execution
    (its handler raised an `Exception`), never by one that suspended or succeeded: the claim
    lives as long as the execution (DESIGN section 13)."""
    executions: dict[str, str] = {}  # owner token -> execution
    ends = {e.inv: e.data["status"] for e in history.of("durable-end")}
    out = []
    for entry in history.entries:
        if entry.kind == "run" and entry.data.get("execution") and entry.data.get("owner"):
            executions[entry.data["owner"]] = entry.data["execution"]
        elif entry.kind == "applied":
            write: Write = entry.data["write"]
            execution = executions.get(write.owner or "")
            if write.op != "release" or execution is None:
                continue
            if ends.get(entry.inv) in ("suspended", "succeeded"):
                out.append(
                    Violation(
                        "durable-claim-kept",
                        f"{entry.inv} released {execution}'s claim of "
                        f"{history.key_label(write.key)} and the execution went on "
                        f"({ends[entry.inv]})",
                    )
                )
    return out


def durable_replay_goes_on(history: History) -> list[Violation]:
    """A replay of a durable execution meets its own claim and goes on: it is never refused
    as in progress while the execution's own claim holds the key."""
    owners: dict[str, set[str]] = {}  # execution -> the owner tokens of its handler's runs
    items: dict[str, dict[str, object] | None] = {}  # key -> its item after the last write
    keys: dict[str, str] = {}  # execution -> its handler's key
    out = []
    for entry in history.entries:
        if entry.kind == "run" and entry.data.get("execution") and entry.data.get("owner"):
            owners.setdefault(entry.data["execution"], set()).add(entry.data["owner"])
            keys[entry.data["execution"]] = entry.data["key"]
        elif entry.kind == "applied":
            write: Write = entry.data["write"]
            items[write.key] = write.after
        elif entry.kind == "error" and entry.text == "IdempotencyAlreadyInProgressError":
            execution = entry.data.get("execution")
            key = keys.get(execution or "")
            holder = _owner(items.get(key or ""))
            if holder is not None and holder in owners.get(execution or "", set()):
                out.append(
                    Violation(
                        "durable-replay-goes-on",
                        f"{entry.inv}, a replay of {execution}, was refused by its own "
                        f"execution's claim of {history.key_label(key or '')}",
                    )
                )
    return out


def lanes_in_order(history: History) -> list[Violation]:
    """In an ordered source, a record's body runs only after every earlier record of its lane
    ran and returned (in this delivery or an earlier one)."""
    if not history.meta.get("ordered"):
        return []
    failed_runs = _failed_runs(history)
    ok: set[str] = set()
    out = []
    for number, entry in enumerate(history.entries):
        if entry.kind != "run" or entry.data.get("lane") is None:
            continue
        name, lane = entry.data["hint"], entry.data["lane"]
        index = int(name[1:])
        waiting = [
            f"r{n}"
            for n in range(1, index)
            if history.meta["lanes"].get(f"r{n}") == lane and f"r{n}" not in ok
        ]
        if waiting:
            out.append(
                Violation(
                    "lanes-in-order",
                    f"{entry.inv} ran {name} of lane {lane} at t={_t(history, entry)} before "
                    f"{', '.join(waiting)} had run",
                )
            )
        if number not in failed_runs:
            ok.add(name)
    return out


def _failed_runs(history: History) -> set[int]:
    """Return the positions of the run entries whose body raised or died."""
    failed = set()
    last_run: dict[str, int] = {}
    for number, entry in enumerate(history.entries):
        if entry.kind == "run":
            last_run[entry.inv] = number
        elif entry.inv in last_run and (
            entry.kind == "fail" or (entry.kind == "crash" and "in the body" in entry.text)
        ):
            failed.add(last_run[entry.inv])
    return failed


def all_records_done(history: History) -> list[Violation]:
    """Once the sources have drained (no faults, every lease passed), every record is done."""
    out = []
    for entry in history.of("drained"):
        for name in entry.data["undone"]:
            out.append(Violation("records-done", f"{name} was never done, even after draining"))
    return out


INVARIANTS: tuple[Callable[[History], list[Violation]], ...] = (
    takeover_fenced,
    reruns_explained,
    answers_match,
    batch_done_durable,
    outbox_published,
    outbox_marked_once,
    stored_results_match,
    durable_claim_kept,
    durable_replay_goes_on,
    lanes_in_order,
    all_records_done,
)


def _owner(item: dict[str, object] | None) -> str | None:
    if not item:
        return None
    value = item.get("owner")
    return value.get("S") if isinstance(value, dict) else None


def _number(item: dict[str, object] | None, name: str) -> int | None:
    if not item:
        return None
    value = item.get(name)
    return int(value["N"]) if isinstance(value, dict) and "N" in value else None


def _t(history: History, entry: Entry) -> str:
    return f"{(entry.t_ms - history.start_ms) / 1000:.3f}s"
