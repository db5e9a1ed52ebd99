"""DynamoDB-specific behaviour: client, errors, corrupt items, item format, round trips, setup."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError
from botocore.stub import Stubber

from idempotent_lambda.exceptions import (
    IdempotencyPersistenceLayerError,
    IdempotencyUnstorableResultError,
)
from idempotent_lambda.persistence import _aws
from idempotent_lambda.persistence.base import (
    DEFAULT_COMPRESSION_THRESHOLD_BYTES,
    MAX_STORED_DATA_BYTES,
    ClaimOutcome,
)
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from idempotent_lambda.persistence.dynamodb._operator import create_idempotency_table
from idempotent_lambda.persistence.dynamodb._schema import ItemSchema
from idempotent_lambda.record import IdempotencyRecord, Status

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

NOW_MS = 4_000_000_000_500
NOW_S = NOW_MS // 1000
LEASE_MS = NOW_MS + 30_000
EXPIRY_S = NOW_S + 3600
KEY = "test.handler#5d41402abc4b2a76b9719d911017c592"
CLAIMED = IdempotencyRecord(
    idempotency_key=KEY,
    status=Status.IN_PROGRESS,
    expiry_timestamp=EXPIRY_S,
    in_progress_expiry_timestamp=LEASE_MS,
    payload_hash="hash-1",
    owner="owner-a",
)
COMPLETED = IdempotencyRecord(
    idempotency_key=KEY,
    status=Status.COMPLETED,
    expiry_timestamp=EXPIRY_S,
    response_data='{"ok":true}',
    payload_hash="hash-1",
    owner="owner-a",
)

Operation = Callable[[DynamoDBPersistenceLayer], object]
OPERATIONS: dict[str, tuple[Operation, str]] = {
    "claim": (lambda s: s.claim(CLAIMED, now_ms=NOW_MS, lease_cutoff_ms=NOW_MS), "PutItem"),
    "complete": (lambda s: s.complete(COMPLETED), "PutItem"),
    "release": (lambda s: s.release(KEY, "owner-a"), "DeleteItem"),
    "get": (lambda s: s.get(KEY), "GetItem"),
}
STUB_METHODS = {"PutItem": "put_item", "DeleteItem": "delete_item", "GetItem": "get_item"}


def client_of(store: DynamoDBPersistenceLayer) -> DynamoDBClient:
    """Return the store's client, which must have been built."""
    assert store._client.built
    return store._get_client()


@contextmanager
def sent_requests(client: DynamoDBClient) -> Iterator[list[str]]:
    """Collect the event name of every HTTP request the client sends (retries included)."""
    sent: list[str] = []

    def record(event_name: str, **_: Any) -> None:
        sent.append(event_name)

    client.meta.events.register("before-send.dynamodb", record)
    try:
        yield sent
    finally:
        client.meta.events.unregister("before-send.dynamodb", record)


# --- client construction --------------------------------------------------------------------


def test_importing_the_store_does_not_import_boto3() -> None:
    """Importing the DynamoDB store module leaves boto3 and botocore unimported."""
    code = (
        "import sys, idempotent_lambda.persistence.dynamodb\n"
        "print(sorted(m for m in ('boto3', 'botocore') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    expected = "[]"
    assert expected == result.stdout.strip()


def test_constructing_the_store_builds_no_client() -> None:
    """A new store has no client until its first operation."""
    store = DynamoDBPersistenceLayer("any-table")
    assert not store._client.built


def test_client_built_lazily_honours_endpoint_env(
    monkeypatch: pytest.MonkeyPatch, dynamodb_endpoint: str, idempotency_table: str
) -> None:
    """With no client given, the first operation builds one at ``AWS_ENDPOINT_URL_DYNAMODB``."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_endpoint)
    # A claim whose answer is late past the 3 s read timeout would be retried and find itself.
    store = DynamoDBPersistenceLayer(idempotency_table, boto_config=Config(read_timeout=60))
    assert not store._client.built
    assert store.claim(CLAIMED, now_ms=NOW_MS, lease_cutoff_ms=NOW_MS).claimed
    assert dynamodb_endpoint == client_of(store).meta.endpoint_url
    expected = CLAIMED
    assert expected == store.get(KEY)


def test_default_client_config_bounds_retries_and_timeouts() -> None:
    """The built client makes at most 3 attempts in standard mode, with 2 s/3 s timeouts.

    Its pool holds 128 connections (botocore's default is 10), as the docs say.
    """
    store = DynamoDBPersistenceLayer("any-table")
    config = client_of_built(store).meta.config
    expected = ({"mode": "standard", "total_max_attempts": 3}, 2, 3, True, 128)
    assert expected == options(
        config,
        "retries",
        "connect_timeout",
        "read_timeout",
        "tcp_keepalive",
        "max_pool_connections",
    )


def test_default_s3_client_config() -> None:
    """The large-result client: the same bounded retries, a 10 s read timeout, 128 connections."""
    store = DynamoDBPersistenceLayer("any-table", large_result_bucket="results")
    config = store._large._client.get().meta.config
    expected = ({"mode": "standard", "total_max_attempts": 3}, 2, 10, 128)
    assert expected == options(
        config, "retries", "connect_timeout", "read_timeout", "max_pool_connections"
    )


def test_user_boto_config_is_merged_over_defaults() -> None:
    """A user ``boto_config`` overrides only the options it sets."""
    store = DynamoDBPersistenceLayer("any-table", boto_config=Config(read_timeout=1))
    config = client_of_built(store).meta.config
    expected = ({"mode": "standard", "total_max_attempts": 3}, 2, 1)
    assert expected == options(config, "retries", "connect_timeout", "read_timeout")


def options(config: Config, *names: str) -> tuple[object, ...]:
    """Return the named options of a botocore config (its attributes are dynamic)."""
    return tuple(getattr(config, name) for name in names)


def client_of_built(store: DynamoDBPersistenceLayer) -> DynamoDBClient:
    """Build the store's client without sending a request and return it."""
    return store._get_client()


def test_given_client_is_used_as_is(dynamodb_client: DynamoDBClient) -> None:
    """A ``boto3_client`` passed in is the one the store uses."""
    store = DynamoDBPersistenceLayer("any-table", boto3_client=dynamodb_client)
    assert dynamodb_client is store._get_client()


def test_client_is_built_once_under_concurrency(
    monkeypatch: pytest.MonkeyPatch, dynamodb_client: DynamoDBClient, idempotency_table: str
) -> None:
    """Concurrent first operations build the client exactly once."""
    builds: list[int] = []

    def slow_build(*_: Any) -> DynamoDBClient:
        builds.append(1)
        time.sleep(0.05)
        return dynamodb_client

    monkeypatch.setattr(_aws, "build_client", slow_build)
    store = DynamoDBPersistenceLayer(idempotency_table)
    threads = [threading.Thread(target=store.get, args=(KEY,)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    expected = [1]
    assert expected == builds


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("operation", OPERATIONS)
def test_unreachable_endpoint_raises_persistence_error(
    monkeypatch: pytest.MonkeyPatch, refused_port: int, operation: str
) -> None:
    """A closed port becomes a persistence error naming the operation, caused by botocore's."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", f"http://127.0.0.1:{refused_port}")
    once = Config(  # refused at once; generous timeouts so a loaded machine cannot time out
        retries={"total_max_attempts": 1, "mode": "standard"},
        connect_timeout=30,
        read_timeout=30,
    )
    store = DynamoDBPersistenceLayer("any-table", boto_config=once)
    call, api = OPERATIONS[operation]
    with pytest.raises(IdempotencyPersistenceLayerError) as raised:
        call(store)
    assert f"DynamoDB {api} failed: EndpointConnectionError" == str(raised.value)
    assert isinstance(raised.value.__cause__, EndpointConnectionError)


@pytest.mark.parametrize("operation", OPERATIONS)
def test_missing_table_raises_persistence_error(
    dynamodb_client: DynamoDBClient, operation: str
) -> None:
    """A missing table becomes a persistence error with the ClientError as cause."""
    store = DynamoDBPersistenceLayer("no-such-table", boto3_client=dynamodb_client)
    call, api = OPERATIONS[operation]
    with pytest.raises(IdempotencyPersistenceLayerError) as raised:
        call(store)
    assert f"DynamoDB {api} failed: ResourceNotFoundException" == str(raised.value)
    assert isinstance(raised.value.__cause__, ClientError)


def test_missing_credentials_raise_persistence_error(
    monkeypatch: pytest.MonkeyPatch, dynamodb_endpoint: str
) -> None:
    """No credentials anywhere becomes a persistence error caused by NoCredentialsError.

    It is the configuration error of test_aws_client_configuration.py, which names the fix.
    """
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AWS_SECURITY_TOKEN", raising=False)
    monkeypatch.delenv("AWS_WEB_IDENTITY_TOKEN_FILE", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_endpoint)
    store = DynamoDBPersistenceLayer("any-table")
    with pytest.raises(IdempotencyPersistenceLayerError) as raised:
        store.get(KEY)
    expected = "DynamoDB GetItem: no complete AWS credentials (Unable to locate credentials)"
    assert expected == str(raised.value).partition(";")[0]
    assert isinstance(raised.value.__cause__, NoCredentialsError)


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize(
    "code",
    [
        "ThrottlingException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "InternalServerError",
        "AccessDeniedException",
        "ValidationException",
    ],
)
def test_service_errors_raise_persistence_error(
    dynamodb_client: DynamoDBClient, operation: str, code: str
) -> None:
    """Every service error code (other than a failed condition) becomes a persistence error."""
    call, api = OPERATIONS[operation]
    store = DynamoDBPersistenceLayer("any-table", boto3_client=dynamodb_client)
    with Stubber(dynamodb_client) as stubber:
        stubber.add_client_error(
            STUB_METHODS[api], service_error_code=code, service_message="secret payload"
        )
        with pytest.raises(IdempotencyPersistenceLayerError) as raised:
            call(store)
    if (operation, code) == ("claim", "AccessDeniedException"):  # names the prefix and rule
        assert "dynamodb:LeadingKeys" in str(raised.value)
        assert "secret payload" not in str(raised.value)
    else:
        assert f"DynamoDB {api} failed: {code}" == str(raised.value)
    assert isinstance(raised.value.__cause__, ClientError)


def test_failed_claim_without_returned_item_reads_the_blocking_record(
    dynamodb_client: DynamoDBClient,
) -> None:
    """An endpoint that ignores ReturnValuesOnConditionCheckFailure costs one extra read."""
    store = DynamoDBPersistenceLayer("any-table", boto3_client=dynamodb_client)
    item = {
        "id": {"S": KEY},
        "status": {"S": "IN_PROGRESS"},
        "expiration": {"N": str(EXPIRY_S)},
        "in_progress_expiration": {"N": str(LEASE_MS)},
        "validation": {"S": "hash-1"},
        "owner": {"S": "owner-a"},
    }
    with Stubber(dynamodb_client) as stubber:
        stubber.add_client_error("put_item", "ConditionalCheckFailedException")
        stubber.add_response("get_item", {"Item": item})
        outcome = store.claim(CLAIMED, now_ms=NOW_MS, lease_cutoff_ms=NOW_MS)
    expected = ClaimOutcome(claimed=False, previous=CLAIMED)
    assert expected == outcome


def test_failed_claim_with_nothing_to_read_raises_persistence_error(
    dynamodb_client: DynamoDBClient,
) -> None:
    """A failed condition with no record to be found, twice, is a persistence error."""
    store = DynamoDBPersistenceLayer("any-table", boto3_client=dynamodb_client)
    with Stubber(dynamodb_client) as stubber:
        for _ in range(2):  # a record gone since the condition failed: the claim is sent again
            stubber.add_client_error("put_item", "ConditionalCheckFailedException")
            stubber.add_response("get_item", {})
        with pytest.raises(IdempotencyPersistenceLayerError) as raised:
            store.claim(CLAIMED, now_ms=NOW_MS, lease_cutoff_ms=NOW_MS)
    assert isinstance(raised.value.__cause__, ClientError)


def test_item_too_large_for_dynamodb_raises_unstorable(
    dynamodb_client: DynamoDBClient, idempotency_table: str
) -> None:
    """DynamoDB's item-size ValidationException becomes an unstorable-result error.

    The shared limit keeps results within an item; here the other attributes push it over (a
    validation hash no hash function makes), which only DynamoDB itself can notice.
    """
    store = DynamoDBPersistenceLayer(
        idempotency_table, boto3_client=dynamodb_client, compression_threshold_bytes=10**7
    )
    store.claim(CLAIMED, now_ms=NOW_MS, lease_cutoff_ms=NOW_MS)
    at_limit = "x" * MAX_STORED_DATA_BYTES
    too_big = IdempotencyRecord(
        KEY, Status.COMPLETED, EXPIRY_S, None, at_limit, "h" * 10_000, "owner-a"
    )
    with pytest.raises(IdempotencyUnstorableResultError) as raised:
        store.complete(too_big)
    assert isinstance(raised.value.__cause__, ClientError)
    expected = CLAIMED
    assert expected == store.get(KEY)


# --- corrupt items --------------------------------------------------------------------------

LIVE = {"expiration": {"N": str(EXPIRY_S)}}
IN_PROGRESS = {"status": {"S": "IN_PROGRESS"}, **LIVE}


@pytest.mark.parametrize(
    "attributes",
    [
        pytest.param({"status": {"S": "DONE"}, **LIVE}, id="unknown-status"),
        pytest.param({"status": {"S": "EXPIRED"}, **LIVE}, id="expired-status-stored"),
        pytest.param(LIVE, id="missing-status"),
        pytest.param({"status": {"N": "1"}, **LIVE}, id="status-not-string"),
        pytest.param({**IN_PROGRESS, "data": {"N": "5"}}, id="data-not-s-or-b"),
        pytest.param({**IN_PROGRESS, "data": {"B": b"not zlib at all"}}, id="garbage-binary"),
        pytest.param({**IN_PROGRESS, "data": {"B": zlib.compress(b"\xff\xfe")}}, id="not-utf8"),
        pytest.param({"status": {"S": "IN_PROGRESS"}, "expiration": {"S": "soon"}}, id="exp-s"),
        pytest.param(
            {"status": {"S": "IN_PROGRESS"}, "expiration": {"N": f"{EXPIRY_S}.5"}}, id="exp-frac"
        ),
        pytest.param({**IN_PROGRESS, "in_progress_expiration": {"S": "x"}}, id="lease-s"),
        pytest.param({**IN_PROGRESS, "owner": {"N": "7"}}, id="owner-not-string"),
        pytest.param({**IN_PROGRESS, "validation": {"BOOL": True}}, id="hash-not-string"),
    ],
)
def test_corrupt_item_raises_persistence_error(
    dynamodb_client: DynamoDBClient,
    dynamodb_store: DynamoDBPersistenceLayer,
    idempotency_table: str,
    attributes: dict[str, Any],
) -> None:
    """Reading or claiming over a malformed item raises a persistence error, never KeyError."""
    item = {"id": {"S": KEY}, **attributes}
    dynamodb_client.put_item(TableName=idempotency_table, Item=item)
    with pytest.raises(IdempotencyPersistenceLayerError) as raised:
        dynamodb_store.get(KEY)
    assert "not zlib" not in str(raised.value)
    with pytest.raises(IdempotencyPersistenceLayerError):
        dynamodb_store.claim(CLAIMED, now_ms=NOW_MS, lease_cutoff_ms=NOW_MS)


def test_item_without_key_raises_persistence_error() -> None:
    """An item lacking the key attribute is reported as corrupt."""
    # The six record names come first (`RecordSchema`), then the table's key.
    schema = ItemSchema("expiration", "lease", "status", "data", "v", "owner", "id", None, "pk")
    with pytest.raises(IdempotencyPersistenceLayerError):
        schema.from_item({"status": {"S": "COMPLETED"}})


# --- item format ----------------------------------------------------------------------------


def raw_item(client: DynamoDBClient, table: str, key: dict[str, Any]) -> dict[str, Any]:
    """Read an item directly, bypassing the store."""
    item: dict[str, Any] = client.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
    return item


def test_stored_item_follows_the_documented_format(
    dynamodb_client: DynamoDBClient,
    dynamodb_store: DynamoDBPersistenceLayer,
    idempotency_table: str,
) -> None:
    """Items carry S status, N seconds expiry, N milliseconds lease, S data, hash and owner."""
    dynamodb_store.claim(CLAIMED, now_ms=NOW_MS, lease_cutoff_ms=NOW_MS)
    assert {
        "id": {"S": KEY},
        "status": {"S": "IN_PROGRESS"},
        "expiration": {"N": str(EXPIRY_S)},
        "in_progress_expiration": {"N": str(LEASE_MS)},
        "validation": {"S": "hash-1"},
        "owner": {"S": "owner-a"},
    } == raw_item(dynamodb_client, idempotency_table, {"id": {"S": KEY}})
    dynamodb_store.complete(COMPLETED)
    assert {
        "id": {"S": KEY},
        "status": {"S": "COMPLETED"},
        "expiration": {"N": str(EXPIRY_S)},
        "data": {"S": '{"ok":true}'},
        "validation": {"S": "hash-1"},
        "owner": {"S": "owner-a"},
    } == raw_item(dynamodb_client, idempotency_table, {"id": {"S": KEY}})


def test_large_result_is_stored_compressed_as_binary(
    dynamodb_client: DynamoDBClient,
    dynamodb_store: DynamoDBPersistenceLayer,
    idempotency_table: str,
) -> None:
    """A result above the threshold is stored as zlib bytes in a B attribute."""
    data = '{"rows":"' + "r" * DEFAULT_COMPRESSION_THRESHOLD_BYTES + '"}'
    dynamodb_store.claim(CLAIMED, now_ms=NOW_MS, lease_cutoff_ms=NOW_MS)
    done = IdempotencyRecord(KEY, Status.COMPLETED, EXPIRY_S, None, data, owner="owner-a")
    assert dynamodb_store.complete(done)
    stored = raw_item(dynamodb_client, idempotency_table, {"id": {"S": KEY}})["data"]
    assert data == zlib.decompress(stored["B"]).decode()


def test_custom_attribute_names_are_used(
    dynamodb_client: DynamoDBClient, make_table: Callable[..., str]
) -> None:
    """Every attribute name is configurable."""
    table = make_table(key_attr="pk", expiry_attr="ttl")
    store = DynamoDBPersistenceLayer(
        table,
        key_attr="pk",
        expiry_attr="ttl",
        in_progress_expiry_attr="lease_ms",
        status_attr="state",
        data_attr="result",
        validation_key_attr="fingerprint",
        owner_attr="holder",
        boto3_client=dynamodb_client,
    )
    store.claim(CLAIMED, now_ms=NOW_MS, lease_cutoff_ms=NOW_MS)
    assert {"pk", "ttl", "lease_ms", "state", "fingerprint", "holder"} == set(
        raw_item(dynamodb_client, table, {"pk": {"S": KEY}})
    )
    assert store.complete(COMPLETED)
    assert "result" in raw_item(dynamodb_client, table, {"pk": {"S": KEY}})
    expected = COMPLETED
    assert expected == store.get(KEY)
    assert store.claim(CLAIMED, now_ms=(EXPIRY_S + 1) * 1000, lease_cutoff_ms=NOW_MS).claimed


@pytest.mark.parametrize(
    ("function_name", "partition"), [("orders-fn", "orders-fn"), (None, "local")]
)
def test_composite_key_partition_defaults_to_function_name(
    monkeypatch: pytest.MonkeyPatch,
    dynamodb_client: DynamoDBClient,
    make_table: Callable[..., str],
    function_name: str | None,
    partition: str,
) -> None:
    """In composite-key mode the partition is ``idempotency#<function name or local>``."""
    if function_name is None:
        monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    else:
        monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", function_name)
    table = make_table(sort_key_attr="sk")
    store = DynamoDBPersistenceLayer(table, sort_key_attr="sk", boto3_client=dynamodb_client)
    store.claim(CLAIMED, now_ms=NOW_MS, lease_cutoff_ms=NOW_MS)
    key = {"id": {"S": f"idempotency#{partition}"}, "sk": {"S": KEY}}
    expected = {"S": "owner-a"}
    assert expected == raw_item(dynamodb_client, table, key)["owner"]


# --- round trips ----------------------------------------------------------------------------


def test_each_operation_is_one_request(dynamodb_store: DynamoDBPersistenceLayer) -> None:
    """Claims (won, blocked, taken over), completes, releases and gets are one request each."""
    client = client_of_built(dynamodb_store)
    newer = IdempotencyRecord(KEY, Status.IN_PROGRESS, EXPIRY_S, LEASE_MS + 60_000, owner="b")
    steps: list[tuple[str, Callable[[], object], object]] = [
        ("get-miss", lambda: dynamodb_store.get(KEY), None),
        (
            "claim",
            lambda: dynamodb_store.claim(CLAIMED, now_ms=NOW_MS, lease_cutoff_ms=NOW_MS).claimed,
            True,
        ),
        (
            "claim-blocked",
            lambda: dynamodb_store.claim(newer, now_ms=NOW_MS, lease_cutoff_ms=NOW_MS).claimed,
            False,
        ),
        (
            "takeover",
            lambda: (
                dynamodb_store.claim(newer, now_ms=NOW_MS, lease_cutoff_ms=LEASE_MS + 1).claimed
            ),
            True,
        ),
        ("complete-stale", lambda: dynamodb_store.complete(COMPLETED), False),
        ("release-stale", lambda: dynamodb_store.release(KEY, "owner-a"), False),
        ("release", lambda: dynamodb_store.release(KEY, "b"), True),
        (
            "claim-again",
            lambda: dynamodb_store.claim(CLAIMED, now_ms=NOW_MS, lease_cutoff_ms=NOW_MS).claimed,
            True,
        ),
        ("complete", lambda: dynamodb_store.complete(COMPLETED), True),
        ("get-hit", lambda: dynamodb_store.get(KEY) == COMPLETED, True),
    ]
    for name, step, expected in steps:
        with sent_requests(client) as sent:
            result = step()
        assert (name, expected, 1) == (name, result, len(sent))


def test_concurrent_claims_have_exactly_one_winner(
    monkeypatch: pytest.MonkeyPatch, dynamodb_endpoint: str, idempotency_table: str
) -> None:
    """Racing claims on one key from one store: exactly one wins, the rest see the winner."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_endpoint)
    # A claim whose answer is late past the 3 s read timeout would be retried and find itself.
    store = DynamoDBPersistenceLayer(idempotency_table, boto_config=Config(read_timeout=60))
    barrier = threading.Barrier(8)
    outcomes: dict[str, Any] = {}

    def race(owner: str) -> None:
        barrier.wait()
        record = IdempotencyRecord(KEY, Status.IN_PROGRESS, EXPIRY_S, LEASE_MS, owner=owner)
        outcomes[owner] = store.claim(record, now_ms=NOW_MS, lease_cutoff_ms=NOW_MS)

    threads = [threading.Thread(target=race, args=(f"owner-{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [owner for owner, outcome in outcomes.items() if outcome.claimed]
    expected = 1
    assert expected == len(winners)
    assert {winners[0]} == {
        outcome.previous.owner for outcome in outcomes.values() if not outcome.claimed
    }


# --- table setup ----------------------------------------------------------------------------


def test_create_table_is_idempotent_and_enables_ttl(
    dynamodb_client: DynamoDBClient, make_table: Callable[..., str]
) -> None:
    """Creating the table twice is harmless, and TTL is on the expiry attribute."""
    table = make_table(expiry_attr="ttl")
    create_idempotency_table(dynamodb_client, table_name=table, expiry_attr="ttl")
    ttl = dynamodb_client.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
    expected = ("ENABLED", "ttl")
    assert expected == (ttl.get("TimeToLiveStatus"), ttl.get("AttributeName"))


def test_create_table_builds_its_own_client_with_composite_key(
    dynamodb_client: DynamoDBClient, dynamodb_endpoint: str
) -> None:
    """Without a client, one is built for ``endpoint_url``; ``sort_key_attr`` adds a RANGE key."""
    table = f"idempotency-{uuid.uuid4().hex[:12]}"
    create_idempotency_table(table_name=table, endpoint_url=dynamodb_endpoint, sort_key_attr="sk")
    try:
        described = dynamodb_client.describe_table(TableName=table)["Table"]
        expected = (
            [
                {"AttributeName": "id", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            "ACTIVE",
            "PAY_PER_REQUEST",
        )
        actual = (
            described.get("KeySchema"),
            described.get("TableStatus"),
            described.get("BillingModeSummary", {}).get("BillingMode"),
        )
        assert expected == actual
    finally:
        dynamodb_client.delete_table(TableName=table)


def test_create_table_tolerates_endpoints_without_ttl(
    dynamodb_client: DynamoDBClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A refused TTL call is logged with its error code, not raised."""
    with Stubber(dynamodb_client) as stubber:
        stubber.add_response("create_table", {})
        stubber.add_client_error("update_time_to_live", "UnknownOperationException")
        create_idempotency_table(dynamodb_client, table_name="any-table", wait=False)
    assert "UnknownOperationException" in caplog.text
