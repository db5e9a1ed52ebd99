"""Security: cross-caller replay, key hygiene, and what reaches the logs and the table.

Cross-caller replay runs against the DynamoDB store on the moto server, for every event shape
and every authenticated setup the HTTP adapter reads (events after AWS's documented formats, in
tests/events/http-authorizers.json): a caller reusing another caller's key never receives the
other caller's response, also when it claims the same identity string through a different
setup; a setup that names no caller is refused, never shared. The IAM policy check lives in
tests/functional/test_template.py (exactly three item actions on the idempotency table's ARN,
no wildcards); it is not repeated here.

Logs: every test of this suite runs under the `log_hygiene` fixture (conftest.py), which
captures all log records and fails the test if the planted secret appears in any of them.
`test_every_decision_is_logged_without_the_secret` makes sure that check is not vacuous: it
drives every decision the engine logs, with the secret in every payload and result.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

import pytest

from idempotent_lambda import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    InMemoryPersistenceLayer,
    idempotent,
    idempotent_function,
)
from idempotent_lambda._observability import Outcome
from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.adapters.dynamodb_stream import idempotent_stream_handler
from idempotent_lambda.adapters.sqs import idempotent_sqs_handler
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests.events import http_events as ev
from tests.reliability._support import SECRET, Executions, outcome_of

IDENTITY_CASES = [
    pytest.param(shape, source, id=f"{shape}-{source}")
    for shape in ev.SHAPES
    for source in ev.CALLER_SOURCES[shape]
]


def http_handler(store: Any, executions: Executions) -> Any:
    @idempotent_http(persistence_store=store, key_prefix="security")
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        who = json.dumps(event.get("requestContext", {}), sort_keys=True)
        run = executions("run")
        return {"statusCode": 201, "body": json.dumps({"run": run, "who": who, "card": SECRET})}

    return handler


def test_every_authenticated_setup_is_exercised() -> None:
    """The cases below cover every setup of the caller table (guards against a forgotten one)."""
    exercised = {setup for setups in ev.CALLER_SOURCES.values() for setup in setups}
    assert {
        "cognito-user-pool",
        "lambda-authorizer",
        "iam",
        "iam-cognito-identity",
        "mtls",
        "api-key",
        "jwt",
        "jwt-client-credentials",
        "jwt-azp",
        "oidc",
    } == exercised
    assert {"apigateway-v2": ("lambda-authorizer",)} == ev.UNMAPPED_SETUPS


@pytest.mark.parametrize("shape", list(ev.UNMAPPED_SETUPS))
def test_a_setup_without_a_readable_caller_is_refused_not_shared(
    shape: str, dynamodb_store: DynamoDBPersistenceLayer
) -> None:
    """HTTP API Lambda authorizer: both callers get a 500, neither gets the other's response."""
    executions = Executions()
    handler = http_handler(dynamodb_store, executions)
    (setup,) = ev.UNMAPPED_SETUPS[shape]
    alice = handler(ev.make_event(shape, key="k-3", caller=(setup, "alice")), None)
    mallory = handler(ev.make_event(shape, key="k-3", caller=(setup, "mallory")), None)
    assert (500, 500) == (alice["statusCode"], mallory["statusCode"])
    assert 0 == executions.total


def test_a_session_cookie_is_never_replayed_to_another_caller(
    dynamodb_store: DynamoDBPersistenceLayer,
) -> None:
    """Without an identity (shared scope), a replay still carries no Set-Cookie."""

    @idempotent_http(persistence_store=dynamodb_store, key_prefix="cookies")
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": 201, "headers": {"Set-Cookie": f"s={SECRET}"}, "body": "ok"}

    handler(ev.make_event("apigateway-v1", key="k-4"), None)
    replay = handler(ev.make_event("apigateway-v1", key="k-4"), None)
    assert SECRET not in json.dumps(replay)


@pytest.mark.parametrize(("shape", "source"), IDENTITY_CASES)
def test_a_caller_reusing_another_callers_key_never_gets_their_response(
    shape: str, source: str, dynamodb_store: DynamoDBPersistenceLayer
) -> None:
    """Same key, same body, another caller: their own execution, never the first one's."""
    executions = Executions()
    handler = http_handler(dynamodb_store, executions)
    alice = ev.make_event(shape, key="shared-key-1", caller=(source, "alice"))
    mallory = ev.make_event(shape, key="shared-key-1", caller=(source, "mallory"))

    first = handler(alice, FakeLambdaContext(10_000))
    stolen = handler(mallory, FakeLambdaContext(10_000))
    assert 201 == stolen["statusCode"]
    assert json.loads(first["body"])["run"] != json.loads(stolen["body"])["run"]
    assert "alice" not in stolen["body"]
    assert 2 == executions.total
    assert first["body"] == handler(alice, FakeLambdaContext(10_000))["body"]  # alice replays


@pytest.mark.parametrize(("shape", "source"), IDENTITY_CASES)
def test_the_same_identity_string_through_another_source_is_another_caller(
    shape: str, source: str, dynamodb_store: DynamoDBPersistenceLayer
) -> None:
    """A caller naming itself like the victim, via a different source, gets its own scope."""
    others = [other for other in ev.CALLER_SOURCES[shape] if other != source]
    executions = Executions()
    handler = http_handler(dynamodb_store, executions)
    victim = handler(ev.make_event(shape, key="k-2", caller=(source, "alice")), None)
    for other in others:
        spoof = handler(ev.make_event(shape, key="k-2", caller=(other, "alice")), None)
        assert victim["body"] != spoof["body"]
    anonymous = handler(ev.make_event(shape, key="k-2"), None)
    assert victim["body"] != anonymous["body"]
    assert 2 + len(others) == executions.total


@pytest.mark.parametrize("shape", ev.SHAPES)
def test_without_an_identity_the_scope_is_shared_as_documented(
    shape: str, dynamodb_store: DynamoDBPersistenceLayer
) -> None:
    """No authorizer: one key, one scope (documented; use an authorizer to separate callers)."""
    executions = Executions()
    handler = http_handler(dynamodb_store, executions)
    first = handler(ev.make_event(shape, key="anon-1"), None)
    second = handler(ev.make_event(shape, key="anon-1"), None)
    assert first["body"] == second["body"]
    assert 1 == executions.total


@pytest.mark.parametrize(
    ("key", "status"),
    [
        ("k" * 255, 201),
        ("k" * 256, 400),
        ("k" * 10_240, 400),
        ("", 400),
        ("tab\tinside", 400),
        ("new\nline", 400),
        ("caf\u00e9", 400),
        ("nul\x00", 400),
        ('"quoted"', 201),
        ('"bad escape \\n"', 400),
    ],
    ids=["255", "256", "10KB", "empty", "tab", "newline", "non-ascii", "nul", "quoted", "escape"],
)
def test_header_keys_are_validated(key: str, status: int) -> None:
    """Keys are 1-255 printable ASCII characters (bare or quoted), else 400."""
    handler = http_handler(InMemoryPersistenceLayer(), Executions())
    response = handler(ev.make_event("apigateway-v2", key=key), None)
    assert status == response["statusCode"]
    if status == 400:
        assert key not in response["body"] or not key
        assert "application/problem+json" == response["headers"]["Content-Type"]


def test_repeated_key_header_with_different_values_is_rejected() -> None:
    """Two different values for the key (multi-value headers): 400, the handler does not run."""
    executions = Executions()
    handler = http_handler(InMemoryPersistenceLayer(), executions)
    event = ev.make_event("apigateway-v1", key="one")
    event["multiValueHeaders"]["Idempotency-Key"] = ["one", "two"]
    assert 400 == handler(event, None)["statusCode"]
    assert 0 == executions.total


def test_the_table_holds_hashed_keys_only(
    dynamodb_store: DynamoDBPersistenceLayer, dynamodb_client: Any
) -> None:
    """Stored keys are ``prefix#hexdigest``: neither the header key nor payload content appear.

    The digest is the default format's (md5, as Powertools); sha256 natively.
    """
    handler = http_handler(dynamodb_store, Executions())
    handler(
        ev.make_event("apigateway-v2", key=f"key-{SECRET}"[:255], caller=("jwt", "alice")), None
    )

    @idempotent(persistence_store=dynamodb_store, key_prefix="security-plain")
    def plain(event: Any, context: Any) -> str:
        return "ok"

    plain({"card": SECRET}, None)
    items = dynamodb_client.scan(TableName=dynamodb_store.table_name)["Items"]
    assert 2 == len(items)
    for item in items:
        prefix, digest = item["id"]["S"].split("#")
        assert prefix in ("security", "security-plain")
        assert 2 * hashlib.new(IdempotencyConfig().hash_name).digest_size == len(digest)
        assert set(digest) <= set("0123456789abcdef")
        assert SECRET not in item["id"]["S"]
        assert "alice" not in item["id"]["S"]


def test_every_decision_is_logged_without_the_secret(log_hygiene: Any) -> None:
    """Drive every engine decision with the secret in payloads and results; logs stay clean."""
    clock = ManualClock()
    store = InMemoryPersistenceLayer(clock=clock)
    outcomes: list[str] = []
    started, gate = threading.Event(), threading.Event()
    config = IdempotencyConfig(
        event_key_jmespath="id",
        payload_validation_jmespath="card",
        decision_hook=lambda decision: outcomes.append(decision.outcome.value),
    )

    @idempotent(persistence_store=store, config=config, key_prefix="logs")
    def handler(event: dict[str, Any], context: Any) -> Any:
        if event.get("mode") == "raise":
            raise ValueError("the body failed")
        if event.get("mode") == "block":
            started.set()
            gate.wait(60)
        if event.get("mode") == "unstorable":
            return {"card": SECRET, "object": object()}
        if event.get("mode") == "steal":
            clock.advance(seconds=902)  # past the 900 s lease and the 1 s tolerance
            handler({"id": "stolen", "card": SECRET}, None)  # takes over the outer claim
        return {"card": SECRET, "echo": event}

    def call(event: dict[str, Any]) -> None:
        outcome_of(lambda: handler(event, None))

    call({"id": 1, "card": SECRET})  # CLAIMED
    call({"id": 1, "card": SECRET})  # REPLAYED
    call({"id": 1, "card": SECRET + "-other"})  # VALIDATION_FAILED
    call({"id": 2, "card": SECRET, "mode": "raise"})  # RELEASED
    call({"id": 3, "card": SECRET, "mode": "unstorable"})  # UNSTORABLE
    call({"card": SECRET})  # SKIPPED (no id)
    blocker = threading.Thread(target=call, args=({"id": 4, "card": SECRET, "mode": "block"},))
    blocker.start()
    assert started.wait(60)
    call({"id": 4, "card": SECRET})  # IN_PROGRESS
    gate.set()
    blocker.join(60)
    clock.advance(seconds=1)
    call({"id": "stolen", "card": SECRET, "mode": "steal"})  # TAKEN_OVER inside, LEASE_LOST out

    @idempotent_function(data_keyword_argument="order", persistence_store=store)
    def process(order: dict[str, Any]) -> dict[str, Any]:
        return {"card": SECRET, **order}

    process(order={"card": SECRET})
    process(order={"card": SECRET})

    expected = {
        Outcome.CLAIMED,
        Outcome.REPLAYED,
        Outcome.VALIDATION_FAILED,
        Outcome.RELEASED,
        Outcome.UNSTORABLE,
        Outcome.SKIPPED,
        Outcome.IN_PROGRESS,
        Outcome.TAKEN_OVER,
        Outcome.LEASE_LOST,
    }
    assert {o.value for o in expected} <= set(outcomes)
    logged = "\n".join(log_hygiene.texts)
    for outcome in expected:
        assert f"outcome={outcome.value}" in logged
    assert SECRET not in logged


def test_batch_adapters_log_without_the_secret(log_hygiene: Any) -> None:
    """SQS and stream failures and successes are logged by id and class, never by content."""
    store = InMemoryPersistenceLayer()

    @idempotent_sqs_handler(persistence_store=store)
    def sqs(record: Any, context: Any) -> str:
        if "fail" in record.body:
            raise ValueError("handler failed")
        return SECRET

    @idempotent_stream_handler(persistence_store=store)
    def stream(record: Any, context: Any) -> str:
        return SECRET

    sqs_event = {
        "Records": [
            {"messageId": "m1", "body": json.dumps({"card": SECRET})},
            {"messageId": "m2", "body": json.dumps({"card": SECRET, "fail": True})},
            {"messageId": "m3", "body": 17},
        ]
    }
    assert 2 == len(sqs(sqs_event, None)["batchItemFailures"])
    stream_event = {
        "Records": [
            {
                "eventID": "e1",
                "eventName": "INSERT",
                "dynamodb": {
                    "Keys": {"pk": {"S": SECRET}},
                    "NewImage": {"card": {"S": SECRET}},
                    "SequenceNumber": "1",
                },
            },
            {"eventID": "e2", "eventName": "INSERT", "dynamodb": {"SequenceNumber": "2"}},
        ]
    }
    assert [{"itemIdentifier": "2"}] == stream(stream_event, None)["batchItemFailures"]
    assert log_hygiene.records > 0
    assert SECRET not in "\n".join(log_hygiene.texts)
