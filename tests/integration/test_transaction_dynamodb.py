"""Transactional completion against a DynamoDB-compatible server: atomicity, fencing, crashes.

moto's server implements ``TransactWriteItems`` with condition expressions, per-item
``CancellationReasons`` and ``ReturnValuesOnConditionCheckFailure`` (checked by these tests).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from idempotent_lambda import (
    DynamoDBPersistenceLayer,
    IdempotencyAlreadyInProgressError,
    IdempotencyConfig,
    IdempotencyRecord,
    InMemoryPersistenceLayer,
    Status,
    idempotent,
    idempotent_function,
)
from idempotent_lambda._claim import CLOCK_SKEW_TOLERANCE_MS
from idempotent_lambda._identity import digest
from idempotent_lambda.exceptions import (
    IdempotencyTransactionConflictError,
    IdempotencyTransactionError,
)
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from idempotent_lambda.transaction import current_transaction

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

HERE = Path(__file__).parent
REPO = HERE.parents[1]
CONFIG = IdempotencyConfig(event_key_jmespath="order_id")


@pytest.fixture
def orders_table(dynamodb_client: DynamoDBClient) -> Iterator[str]:
    """Yield a fresh business table with partition key ``pk`` (S)."""
    name = f"orders-{uuid.uuid4().hex[:12]}"
    dynamodb_client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    yield name
    with contextlib.suppress(dynamodb_client.exceptions.ResourceNotFoundException):
        dynamodb_client.delete_table(TableName=name)


@contextmanager
def round_trips(client: DynamoDBClient) -> Iterator[list[str]]:
    """Collect the DynamoDB operations ``client`` sends while the block runs."""
    sent: list[str] = []

    def count(request: Any, **kwargs: Any) -> None:
        sent.append(request.headers["X-Amz-Target"].decode().split(".")[-1])

    client.meta.events.register("before-send.dynamodb", count)
    try:
        yield sent
    finally:
        client.meta.events.unregister("before-send.dynamodb", count)


def items(client: DynamoDBClient, table: str) -> list[dict[str, Any]]:
    """Return every item of ``table``."""
    return client.scan(TableName=table, ConsistentRead=True)["Items"]  # type: ignore[return-value]


def record_item(client: DynamoDBClient, table: str, order_id: str) -> dict[str, Any] | None:
    """Return the raw idempotency item of the ``orders`` handler for ``order_id``."""
    key = f"orders#{digest(CONFIG, order_id)}"
    response = client.get_item(TableName=table, Key={"id": {"S": key}}, ConsistentRead=True)
    return response.get("Item")  # type: ignore[return-value]


def order_handler(store: DynamoDBPersistenceLayer, orders: str, runs: list[str]) -> Any:
    """Return a handler that creates the order item in the transaction."""

    @idempotent(persistence_store=store, config=CONFIG, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event["order_id"])
        current_transaction().put(
            orders,
            {"pk": event["order_id"], "total": Decimal("9.90")},
            condition="attribute_not_exists(pk)",
            return_old_on_failure=True,
        )
        return {"order_id": event["order_id"], "run": len(runs)}

    return handler


def test_business_writes_and_the_record_commit_in_one_round_trip(
    dynamodb_store: DynamoDBPersistenceLayer,
    dynamodb_client: DynamoDBClient,
    idempotency_table: str,
    orders_table: str,
) -> None:
    """First call: claim + one TransactWriteItems; replay: one request; both items written."""
    runs: list[str] = []
    handler = order_handler(dynamodb_store, orders_table, runs)

    with round_trips(dynamodb_client) as first:
        handler({"order_id": "o1"}, FakeLambdaContext())
    with round_trips(dynamodb_client) as replay:
        replayed = handler({"order_id": "o1"}, FakeLambdaContext())

    assert ["PutItem", "TransactWriteItems"] == first
    assert ["PutItem"] == replay
    assert {"order_id": "o1", "run": 1} == replayed
    assert [{"pk": {"S": "o1"}, "total": {"N": "9.90"}}] == items(dynamodb_client, orders_table)
    record = record_item(dynamodb_client, idempotency_table, "o1")
    assert record is not None
    assert Status.COMPLETED == record["status"]["S"]


def test_every_operation_and_both_forms_commit_together(
    dynamodb_store: DynamoDBPersistenceLayer,
    dynamodb_client: DynamoDBClient,
    orders_table: str,
) -> None:
    """Put, Update, Delete, ConditionCheck; document, low-level, Table resource and Attr forms."""
    import boto3
    from boto3.dynamodb.conditions import Attr

    dynamodb_client.put_item(TableName=orders_table, Item={"pk": {"S": "stock"}, "qty": {"N": "5"}})
    dynamodb_client.put_item(TableName=orders_table, Item={"pk": {"S": "cart"}})
    dynamodb_client.put_item(TableName=orders_table, Item={"pk": {"S": "customer"}})
    resource_table = boto3.resource(
        "dynamodb",
        endpoint_url=dynamodb_client.meta.endpoint_url,
        region_name="us-east-1",
    ).Table(orders_table)

    @idempotent(persistence_store=dynamodb_store, config=CONFIG)
    def handler(event: dict[str, Any], context: Any) -> str:
        transaction = current_transaction()
        transaction.put(resource_table, {"pk": "order", "lines": [{"sku": "a", "n": 2}]})
        transaction.update(
            orders_table,
            {"pk": "stock"},
            "SET qty = qty - :n",
            condition=Attr("qty").gte(2),
            values={":n": 2},
        )
        transaction.delete(orders_table, {"pk": "cart"})
        transaction.add(
            {
                "ConditionCheck": {
                    "TableName": orders_table,
                    "Key": {"pk": {"S": "customer"}},
                    "ConditionExpression": "attribute_exists(pk)",
                }
            }
        )
        return "done"

    assert "done" == handler({"order_id": "o1"}, FakeLambdaContext())

    by_key = {item["pk"]["S"]: item for item in items(dynamodb_client, orders_table)}
    assert ["customer", "order", "stock"] == sorted(by_key)
    assert {"N": "3"} == by_key["stock"]["qty"]
    assert {"L": [{"M": {"sku": {"S": "a"}, "n": {"N": "2"}}}]} == by_key["order"]["lines"]


def test_a_business_condition_failure_writes_nothing_and_releases_the_record(
    dynamodb_store: DynamoDBPersistenceLayer,
    dynamodb_client: DynamoDBClient,
    idempotency_table: str,
    orders_table: str,
) -> None:
    """The order exists: typed error with CancellationReasons, no record, a retry runs again."""
    dynamodb_client.put_item(TableName=orders_table, Item={"pk": {"S": "o1"}, "old": {"S": "y"}})
    runs: list[str] = []
    handler = order_handler(dynamodb_store, orders_table, runs)

    with pytest.raises(IdempotencyTransactionConflictError) as caught:
        handler({"order_id": "o1"}, FakeLambdaContext())

    (reason,) = caught.value.reasons
    assert ("Put", orders_table, "ConditionalCheckFailed") == (
        reason.operation,
        reason.table,
        reason.code,
    )
    assert {"pk": {"S": "o1"}, "old": {"S": "y"}} == reason.item
    assert "write 0 (Put on " in str(caught.value)
    assert record_item(dynamodb_client, idempotency_table, "o1") is None
    assert [{"pk": {"S": "o1"}, "old": {"S": "y"}}] == items(dynamodb_client, orders_table)
    dynamodb_client.delete_item(TableName=orders_table, Key={"pk": {"S": "o1"}})
    assert {"order_id": "o1", "run": 2} == handler({"order_id": "o1"}, FakeLambdaContext())


def test_a_lost_lease_cancels_the_whole_transaction(
    dynamodb_store: DynamoDBPersistenceLayer,
    dynamodb_client: DynamoDBClient,
    idempotency_table: str,
    orders_table: str,
) -> None:
    """Another owner took the key while the body ran: nothing written, its record untouched."""

    @idempotent(persistence_store=dynamodb_store, config=CONFIG, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> str:
        current_transaction().put(orders_table, {"pk": "o1"})
        stolen = record_item(dynamodb_client, idempotency_table, "o1")
        assert stolen is not None
        stolen["owner"] = {"S": "the-new-owner"}
        dynamodb_client.put_item(TableName=idempotency_table, Item=stolen)  # type: ignore[arg-type]
        return "mine"

    with pytest.raises(IdempotencyAlreadyInProgressError, match="nothing was written"):
        handler({"order_id": "o1"}, FakeLambdaContext())

    assert [] == items(dynamodb_client, orders_table)
    record = record_item(dynamodb_client, idempotency_table, "o1")
    assert record is not None
    assert ("INPROGRESS", "the-new-owner") == (record["status"]["S"], record["owner"]["S"])


def test_99_business_writes_fit_and_the_100th_is_refused_before_sending(
    dynamodb_store: DynamoDBPersistenceLayer,
    dynamodb_client: DynamoDBClient,
    idempotency_table: str,
    orders_table: str,
) -> None:
    """99 writes + the record = DynamoDB's 100-item limit; one more never reaches the server."""

    @idempotent(persistence_store=dynamodb_store, config=CONFIG, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> int:
        for n in range(event["writes"]):
            current_transaction().put(orders_table, {"pk": f"{event['order_id']}-{n}"})
        return event["writes"]  # type: ignore[no-any-return]

    assert 99 == handler({"order_id": "a", "writes": 99}, FakeLambdaContext())
    with round_trips(dynamodb_client) as sent, pytest.raises(IdempotencyTransactionError):
        handler({"order_id": "b", "writes": 100}, FakeLambdaContext())

    assert ["PutItem", "DeleteItem"] == sent  # claim, release: no TransactWriteItems
    assert 99 == len(items(dynamodb_client, orders_table))
    assert record_item(dynamodb_client, idempotency_table, "b") is None


def test_a_write_on_the_invocations_own_record_is_refused(
    dynamodb_store: DynamoDBPersistenceLayer, idempotency_table: str
) -> None:
    """The record's item cannot be in the transaction twice."""

    @idempotent(persistence_store=dynamodb_store, config=CONFIG, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> int:
        key = f"orders#{digest(CONFIG, event['order_id'])}"
        current_transaction().update(idempotency_table, {"id": key}, "SET x = :x", values={":x": 1})
        return 1

    with pytest.raises(IdempotencyTransactionError, match="own idempotency record"):
        handler({"order_id": "o1"}, FakeLambdaContext())


def test_a_transaction_dynamodb_rejects_writes_nothing(
    dynamodb_store: DynamoDBPersistenceLayer,
    dynamodb_client: DynamoDBClient,
    idempotency_table: str,
    orders_table: str,
) -> None:
    """Two writes on one item (a ValidationException): typed error, record released."""

    @idempotent(persistence_store=dynamodb_store, config=CONFIG, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> int:
        current_transaction().put(orders_table, {"pk": "same"})
        current_transaction().delete(orders_table, {"pk": "same"})
        return 1

    with pytest.raises(IdempotencyTransactionError, match="ValidationException"):
        handler({"order_id": "o1"}, FakeLambdaContext())

    assert [] == items(dynamodb_client, orders_table)
    assert record_item(dynamodb_client, idempotency_table, "o1") is None


def test_without_a_key_the_writes_commit_as_a_plain_transaction(
    dynamodb_store: DynamoDBPersistenceLayer,
    dynamodb_client: DynamoDBClient,
    idempotency_table: str,
    orders_table: str,
) -> None:
    """No key material: no record, the writes still commit (and still fail atomically)."""

    @idempotent_function(
        data_keyword_argument="order", persistence_store=dynamodb_store, config=CONFIG
    )
    def create(order: dict[str, Any]) -> str:
        current_transaction().put(orders_table, {"pk": "x"}, condition="attribute_not_exists(pk)")
        current_transaction().put(orders_table, {"pk": "y"})
        return "created"

    assert "created" == create(order={"no_key": 1})
    with pytest.raises(IdempotencyTransactionConflictError):
        create(order={"no_key": 2})

    assert ["x", "y"] == sorted(i["pk"]["S"] for i in items(dynamodb_client, orders_table))
    assert [] == items(dynamodb_client, idempotency_table)


# --- the transactional store contract, on both stores ------------------------------------------


@pytest.fixture(params=["in-memory", "dynamodb"])
def contract_store(request: pytest.FixtureRequest, orders_table: str) -> Any:
    """Return each transactional store in turn."""
    if request.param == "in-memory":
        return InMemoryPersistenceLayer()
    return request.getfixturevalue("dynamodb_store")


def committed(store: Any, client: DynamoDBClient, orders: str) -> list[str]:
    """Return the order keys a store committed (in memory: handed over; DynamoDB: written)."""
    if isinstance(store, InMemoryPersistenceLayer):
        return [write["Put"]["Item"]["pk"]["S"] for write in store.committed_writes]
    return sorted(item["pk"]["S"] for item in items(client, orders))


def claimed(store: Any, key: str, owner: str) -> IdempotencyRecord:
    """Claim ``key`` for ``owner`` and return the COMPLETED record that would finish it."""
    now = store.clock.now_ms()
    record = IdempotencyRecord(
        idempotency_key=key,
        status=Status.IN_PROGRESS,
        expiry_timestamp=now // 1000 + 3600,
        in_progress_expiry_timestamp=now + 60_000,
        owner=owner,
    )
    assert store.claim(record, now_ms=now, lease_cutoff_ms=now).claimed
    return IdempotencyRecord(
        idempotency_key=key,
        status=Status.COMPLETED,
        expiry_timestamp=now // 1000 + 3600,
        response_data='{"ok":true}',
        owner=owner,
    )


def test_contract_complete_with_commits_the_record_and_the_writes(
    contract_store: Any, dynamodb_client: DynamoDBClient, orders_table: str
) -> None:
    """Owned: True; the record is COMPLETED with its result and the writes are committed."""
    write = {"Put": {"TableName": orders_table, "Item": {"pk": {"S": "o1"}}}}

    assert contract_store.complete_with(claimed(contract_store, "k", "me"), [write]) is True

    record = contract_store.get("k")
    assert (Status.COMPLETED, '{"ok":true}') == (record.status, record.response_data)
    assert ["o1"] == committed(contract_store, dynamodb_client, orders_table)


@pytest.mark.parametrize("situation", ["other owner", "no record", "completed"])
def test_contract_complete_with_commits_nothing_unless_owned(
    contract_store: Any, dynamodb_client: DynamoDBClient, orders_table: str, situation: str
) -> None:
    """Not IN_PROGRESS under this owner: False, and not one write is committed."""
    write = {"Put": {"TableName": orders_table, "Item": {"pk": {"S": "o1"}}}}
    completion = claimed(contract_store, "k", "me")
    if situation == "other owner":
        completion = dataclasses.replace(completion, owner="someone-else")
    elif situation == "no record":
        assert contract_store.release("k", "me")
    else:
        assert contract_store.complete(completion)

    assert contract_store.complete_with(completion, [write]) is False
    assert [] == committed(contract_store, dynamodb_client, orders_table)


def test_contract_write_transaction_commits_without_a_record(
    contract_store: Any, dynamodb_client: DynamoDBClient, orders_table: str
) -> None:
    """A plain transaction commits its writes and touches no record."""
    writes = [
        {"Put": {"TableName": orders_table, "Item": {"pk": {"S": name}}}} for name in ("a", "b")
    ]

    contract_store.write_transaction(writes)

    assert ["a", "b"] == committed(contract_store, dynamodb_client, orders_table)


# --- a crash between business write and completion is impossible by construction ----------------

KILL_POINTS = ["before_body", "after_queue", "before_commit", "in_flight", "after_commit"]
WORKER_LEASE_MS = 60_000


class ServerSideKill:
    """Kills an armed worker from inside the in-process moto server, once its request arrived.

    So the ``in_flight`` worker is surely dead, with its whole request received, before the
    server commits it: no timer in the worker races the machine's load. ``done`` is set once the
    server has finished a transaction.
    """

    def __init__(self) -> None:
        self.done = threading.Event()
        self.armed = threading.Event()
        self.pid = 0

    def arm(self, pid: int) -> None:
        """Kill process ``pid`` when the next transaction reaches the server."""
        self.pid = pid
        self.armed.set()

    def kill_armed_worker(self) -> None:
        """SIGKILL the armed worker and wait until it is gone (a zombie counts as gone)."""
        if not self.armed.is_set():
            return
        os.kill(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (FileNotFoundError, ProcessLookupError, IndexError):
                return
            if state in ("Z", "X"):
                return
            time.sleep(0.01)
        raise AssertionError(f"worker {self.pid} still alive 60 s after SIGKILL")


@pytest.fixture
def server_side_kill(monkeypatch: pytest.MonkeyPatch) -> ServerSideKill | None:
    """Let the in-process moto server kill the worker; None on an external server."""
    if os.environ.get("IDEMPOTENT_LAMBDA_TEST_ENDPOINT"):
        return None
    from moto.dynamodb.models import DynamoDBBackend

    original = DynamoDBBackend.transact_write_items
    killer = ServerSideKill()

    def kill_then_commit(*args: Any, **kwargs: Any) -> Any:
        killer.kill_armed_worker()
        try:
            return original(*args, **kwargs)
        finally:
            killer.done.set()

    monkeypatch.setattr(DynamoDBBackend, "transact_write_items", kill_then_commit)
    return killer


@pytest.mark.parametrize("kill_point", KILL_POINTS)
def test_a_killed_worker_leaves_both_or_neither_and_a_retry_finishes_exactly_once(
    server_side_kill: ServerSideKill | None,
    dynamodb_endpoint: str,
    dynamodb_client: DynamoDBClient,
    idempotency_table: str,
    orders_table: str,
    kill_point: str,
) -> None:
    """SIGKILL at every point: order item and COMPLETED record exist together or not at all.

    ``in_flight`` dies while the server works on its request: the server commits it all.

    When neither does, the record is IN_PROGRESS until its lease ends; then a retry (here on a
    clock moved past the lease, instead of sleeping) writes both, once; later retries replay.
    """
    server_kills = kill_point == "in_flight" and server_side_kill is not None
    worker = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "_transaction_worker.py"),
            dynamodb_endpoint,
            idempotency_table,
            orders_table,
            "in_flight_server" if server_kills else kill_point,
            str(WORKER_LEASE_MS),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    if server_kills:
        assert server_side_kill is not None
        server_side_kill.arm(worker.pid)
    _, stderr = worker.communicate(timeout=120)
    assert -9 == worker.returncode, stderr.decode()[-2000:]
    if server_kills:
        assert server_side_kill is not None
        assert server_side_kill.done.wait(60)  # the server finishes what the dead worker sent

    order_id = "order-7"
    orders = items(dynamodb_client, orders_table)
    record = record_item(dynamodb_client, idempotency_table, order_id)
    assert record is not None  # every kill point is after the claim
    completed = record["status"]["S"] == "COMPLETED"
    if completed:  # both, and the stored result is the one of the run that wrote the order
        assert [orders[0]["writer"]["S"]] == [json.loads(record["data"]["S"])["writer"]]
    else:  # neither
        assert ("INPROGRESS", []) == (record["status"]["S"], orders)  # the default's spelling
    if kill_point == "after_commit" or server_kills:
        assert completed  # in flight: the server finishes what it received from a dead client
    elif kill_point != "in_flight":
        assert not completed

    lease_end = record.get("in_progress_expiration", {"N": str(int(time.time() * 1000))})
    clock = ManualClock(int(lease_end["N"]))  # a live lease, whose end is one step away
    runs: list[str] = []
    store = DynamoDBPersistenceLayer(idempotency_table, boto3_client=dynamodb_client, clock=clock)
    handler = order_handler(store, orders_table, runs)
    if not completed:
        with pytest.raises(IdempotencyAlreadyInProgressError):  # the lease has not passed yet
            handler({"order_id": order_id}, FakeLambdaContext(30_000, clock=clock))
    clock.advance(ms=CLOCK_SKEW_TOLERANCE_MS + 1)
    first = handler({"order_id": order_id}, FakeLambdaContext(30_000, clock=clock))
    second = handler({"order_id": order_id}, FakeLambdaContext(30_000, clock=clock))

    assert first == second
    assert (0 if completed else 1) == len(runs)
    assert 1 == len(items(dynamodb_client, orders_table))
    final = record_item(dynamodb_client, idempotency_table, order_id)
    assert final is not None
    assert "COMPLETED" == final["status"]["S"]


def test_the_worker_completes_when_not_killed(
    dynamodb_endpoint: str,
    dynamodb_client: DynamoDBClient,
    idempotency_table: str,
    orders_table: str,
) -> None:
    """The worker itself is sound: without a kill it commits and prints its result."""
    worker = subprocess.run(
        [
            sys.executable,
            str(HERE / "_transaction_worker.py"),
            dynamodb_endpoint,
            idempotency_table,
            orders_table,
            "none",
            str(WORKER_LEASE_MS),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        timeout=120,  # a fresh interpreter importing boto3 on a loaded machine: only a hang
        check=False,
    )

    assert 0 == worker.returncode, worker.stderr.decode()[-2000:]
    assert b"order-7" in worker.stdout
    assert 1 == len(items(dynamodb_client, orders_table))
