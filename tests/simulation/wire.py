"""The network between the library and its AWS services, as the world decides it: every
request of a simulated client comes to `Wire.on_send`, which delivers it, fails it, holds it
while the world goes on, or loses its reply, and records what each write changed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ReadTimeoutError
from botocore.httpsession import URLLib3Session

from idempotent_lambda._outbox_format import is_outbox_key
from tests.simulation import network
from tests.simulation.history import Write
from tests.simulation.network import Crash
from tests.simulation.program import Fault

if TYPE_CHECKING:
    from tests.simulation.world import Invocation, World

#: The lifecycle steps a fault may name instead of an operation (``complete#1``).
LIFECYCLE = ("claim", "complete", "release")


#: The S3 requests of a result offloaded to S3 (their bodies are not JSON).
S3_OPS = ("PutObject", "GetObject", "HeadObject")
#: The per-entry error codes EventBridge refuses an entry with (both worth a retry).
REFUSAL_CODES = ("ThrottlingException", "InternalFailure")


class Refusals:
    """EventBridge refusing single entries of a ``PutEvents`` (``FailedEntryCount`` > 0).

    The n-th event the bus meets is refused on its first ``n % 4`` sends: never, once or twice
    (the publisher's own retries get it through), or three times (every attempt of one
    invocation: the publisher must leave it unpublished for a redelivery or the sweeper). The
    order events meet the bus is the program's, so a seed refuses the same entries every run.
    """

    def __init__(self) -> None:
        self.plan: dict[str, int] = {}  # event id -> sends to refuse
        self.sent: dict[str, int] = {}

    def code(self, event_id: str) -> str | None:
        """Return the error code the bus answers this send of ``event_id`` with, or None."""
        refused = self.plan.setdefault(event_id, len(self.plan) % 4)
        self.sent[event_id] = sent = self.sent.get(event_id, 0) + 1
        return REFUSAL_CODES[sent % 2] if sent <= refused else None


class Wire:
    """Decides the fate of each request, and records it in the world's history."""

    def __init__(self, world: World) -> None:
        self.w = world
        self._http = URLLib3Session()
        self.refusals = Refusals() if world.setup.refuse else None

    def read_item(self, key: str) -> dict[str, Any] | None:
        return self.w.observer.get_item(  # type: ignore[no-any-return]
            TableName=self.w.table, Key=self.w.schema.key(key), ConsistentRead=True
        ).get("Item")

    def on_send(self, request: Any, operation: str, client: Any) -> Any:
        """Decide the fate of one request of a simulated client."""
        inv = self.w.stack[-1] if self.w.stack else None
        if inv is None:
            return None
        if inv.dead:
            raise Crash("dead invocation")
        inv.requests += 1
        body = json.loads(request.body) if request.body and operation not in S3_OPS else {}
        writes = self.describe(operation, body)
        fault = None
        # A fault names the n-th request of an operation, or of a lifecycle step (whatever
        # request carries it: a completion is a PutItem, a BatchWriteItem or a transaction).
        steps = [operation, *dict.fromkeys(w.op for w in writes if w.op in LIFECYCLE)]
        for name in steps:
            inv.counts[name] = inv.counts.get(name, 0) + 1
            fault = fault or inv.faults.get(f"{name}#{inv.counts[name]}")
        summary = ", ".join(f"{w.op} {self.label(w.key)} as {w.owner_label}" for w in writes)
        self.w.history.add(
            self.w.clock.now_ms(),
            inv.name,
            "send",
            f"#{inv.requests} {operation} {summary}" + (f" [{fault}]" if fault else ""),
        )
        if fault is None:
            return self.deliver(inv, request, operation, writes)
        if fault.kind == "throttle":
            return network.error_response(request, 400, "ProvisionedThroughputExceededException")
        if fault.kind == "error":
            return network.error_response(request, 500, "InternalServerError")
        if fault.kind == "crash":
            self.w.die(inv, f"crashed before request #{inv.requests}")
        if fault.kind == "crash_applied":
            self.deliver(inv, request, operation, writes)
            self.w.die(inv, f"crashed after request #{inv.requests} was applied")
        if fault.kind == "lost_reply":
            self.deliver(inv, request, operation, writes)
            self.w.history.add(self.w.clock.now_ms(), inv.name, "lost", "the reply is lost")
            raise ReadTimeoutError(endpoint_url=request.url)
        return self.hold(inv, fault, request, operation, writes)

    def hold(
        self, inv: Invocation, fault: Fault, request: Any, operation: str, writes: list[Any]
    ) -> Any:
        """Keep the request in flight, run ``fault.during``, then apply it (if it may)."""
        settings = self.w.envs[inv.env].settings
        now = self.w.clock.now_ms()
        # The last attempt was sent before Lambda ended the invocation, and no later than
        # botocore's retries allow.
        longest = min(
            network.true_bound_ms(settings),
            inv.deadline_ms - now + network.attempt_ms(settings),
        )
        wanted = fault.ms + (inv.deadline_ms - now if fault.past_deadline else 0)
        held = max(0, min(wanted, longest))
        self.w.history.add(now, inv.name, "hold", f"request held {held}ms")
        self.w.advance(held)
        self.w.run_steps(fault.during)
        if self.w.clock.now_ms() - now > longest:
            # What ran meanwhile took longer than the request may: every attempt timed out
            # unapplied, and botocore gave up.
            self.w.history.add(self.w.clock.now_ms(), inv.name, "lost", "the request timed out")
            if self.w.clock.now_ms() > inv.deadline_ms:
                self.w.die(inv, "ended by Lambda at its deadline while the request was out")
            raise ReadTimeoutError(endpoint_url=request.url)
        response = self.deliver(inv, request, operation, writes)
        if self.w.clock.now_ms() > inv.deadline_ms:
            self.w.die(inv, "ended by Lambda at its deadline while the request was out")
        return response

    def label(self, key: str) -> str:
        return self.w.history.key_label(key)

    def describe(self, operation: str, body: dict[str, Any]) -> list[Any]:
        """Return what a request writes: one `_Change` per item."""
        changes: list[_Change] = []

        def item_change(item: dict[str, Any], kind: str, values: dict[str, Any]) -> None:
            key = item.get(self.w.schema.idempotency_key_attr, {}).get("S")
            if key is None:
                return
            owner = item.get(self.w.schema.owner_attr, {}).get("S")
            owner = owner or values.get(":owner", {}).get("S")
            if is_outbox_key(key):
                op = "outbox" if kind == "put" else "mark"
                self.w.history.name(key, "event " + key.rpartition("#")[2][:8])
            elif kind == "delete":
                op = "release"
            elif kind == "put":
                status = item.get(self.w.schema.status_attr, {}).get("S")
                op = "complete" if status == "COMPLETED" else "claim"
            else:
                op = "update"
            changes.append(_Change(key, op, owner, self.w.history.owner_label(key, owner)))

        if operation == "PutItem":
            item_change(body["Item"], "put", body.get("ExpressionAttributeValues", {}))
        elif operation == "DeleteItem":
            item_change(body["Key"], "delete", body.get("ExpressionAttributeValues", {}))
        elif operation == "UpdateItem":
            item_change(body["Key"], "update", body.get("ExpressionAttributeValues", {}))
        elif operation == "BatchWriteItem":
            for requests in body["RequestItems"].values():
                for one in requests:
                    if "PutRequest" in one:
                        item_change(one["PutRequest"]["Item"], "put", {})
                    else:
                        item_change(one["DeleteRequest"]["Key"], "delete", {})
        elif operation == "TransactWriteItems":
            for one in body["TransactItems"]:
                for name, kind in (("Put", "put"), ("Delete", "delete"), ("Update", "update")):
                    if name in one:
                        part = one[name]
                        values = part.get("ExpressionAttributeValues", {})
                        item_change(part.get("Item") or part["Key"], kind, values)
        return changes

    def deliver(self, inv: Invocation, request: Any, operation: str, changes: list[Any]) -> Any:
        """Send the request to moto; record what it changed."""
        # Only the simulated clients write, so the last write's result is the item's state.
        before = {c.key: self.w.items.get(c.key) for c in changes}
        if operation == "PutEvents":
            entries = json.loads(request.body)["Entries"]
        response = self._http.send(request)
        status = response.status_code
        after = {c.key: self.read_item(c.key) for c in changes}
        self.w.items.update(after)
        if operation == "PutEvents" and status == 200:
            answered = json.loads(response.content).get("Entries", [])
            if self.refusals is not None:
                response, answered = self.refuse(inv, request, entries, answered)
            for entry, result in zip(entries, answered, strict=False):
                if result.get("EventId"):
                    detail = json.loads(entry["Detail"])
                    event_id = detail["outbox"]["id"]
                    self.w.outbox.bus.append({**entry, "id": event_id, "delivered": False})
                    self.w.history.add(
                        self.w.clock.now_ms(),
                        inv.name,
                        "publish",
                        f"event {event_id[:8]} of {detail['k']} by {detail['inv']}",
                        event_id=event_id,
                        k=detail["k"],
                        by=detail["inv"],
                    )
        for change in changes:
            old, new = before[change.key], after[change.key]
            if old == new:
                continue
            write = Write(change.key, change.op, change.owner, old, new)
            self.w.history.add(
                self.w.clock.now_ms(),
                inv.name,
                "applied",
                f"{change.op} {self.label(change.key)} by {change.owner_label}: "
                f"{self.describe_item(old)} -> {self.describe_item(new)}",
                write=write,
            )
        return response

    def refuse(
        self, inv: Invocation, request: Any, entries: list[Any], answered: list[Any]
    ) -> tuple[Any, list[Any]]:
        """Answer the ``PutEvents`` with the entries `Refusals` refuses failed, one by one."""
        assert self.refusals is not None
        results = []
        for entry, result in zip(entries, answered, strict=False):
            event_id = json.loads(entry["Detail"])["outbox"]["id"]
            code = self.refusals.code(event_id)
            if code is None:
                results.append(result)
                continue
            results.append({"ErrorCode": code, "ErrorMessage": "refused (simulated)"})
            self.w.history.add(
                self.w.clock.now_ms(), inv.name, "refused", f"event {event_id[:8]}: {code}"
            )
        failed = sum(1 for r in results if "ErrorCode" in r)
        body = {"FailedEntryCount": failed, "Entries": results}
        return network.json_response(request, body), results

    def describe_item(self, item: dict[str, Any] | None) -> str:
        if item is None:
            return "none"
        key = item[self.w.schema.idempotency_key_attr]["S"]
        if is_outbox_key(key):
            published = "published" if "published_at" in json.dumps(item) else "unpublished"
            return f"outbox({published})"
        status = item.get(self.w.schema.status_attr, {}).get("S")
        owner = item.get(self.w.schema.owner_attr, {}).get("S")
        return f"{status}({self.w.history.owner_label(key, owner)})"


@dataclass
class _Change:
    key: str
    op: str
    owner: str | None
    owner_label: str
