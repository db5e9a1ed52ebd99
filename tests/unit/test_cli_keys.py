"""`idempotent-lambda key` prints the key each decorator and adapter really stores, or refuses.

Every test decorates a real module-level function here, runs it on an in-memory store and
compares the key it claimed with what the command prints for the same event, options and
``--handler`` (this module and the function's qualified name).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyConfig,
    InMemoryPersistenceLayer,
    idempotent,
    idempotent_function,
)
from idempotent_lambda._setup import setup_of
from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.adapters.dynamodb_stream import idempotent_stream_handler
from idempotent_lambda.adapters.kafka import idempotent_kafka_handler
from idempotent_lambda.adapters.sqs import idempotent_sqs_handler
from idempotent_lambda.cli import main
from idempotent_lambda.cli._dry_run import ADAPTERS
from idempotent_lambda.record import IdempotencyRecord
from idempotent_lambda.testing import kafka_event
from tests.events.http_events import make_event

EVENTS = Path(__file__).parents[1] / "events"
FUNCTION = "orders-prod"


@dataclass
class Run:
    """What one CLI run returned and printed."""

    code: int
    out: str
    err: str

    def lines(self) -> list[Any]:
        """Return stdout parsed as JSON Lines."""
        return [json.loads(line) for line in self.out.splitlines()]


@pytest.fixture
def key_of(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Callable[..., Run]:
    """Return ``run(event, *options) -> Run`` for ``idempotent-lambda key ... EVENT.json``."""

    def run(event: Any, *options: str) -> Run:
        path = tmp_path / "event.json"
        path.write_text(json.dumps(event), encoding="utf-8")
        code = main(["key", *options, str(path)])
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run


@pytest.fixture
def deployed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the decorated functions as the Lambda function FUNCTION."""
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", FUNCTION)


class ClaimLog(InMemoryPersistenceLayer):
    """An in-memory store (of any record format) that lists what was claimed."""

    def __init__(self) -> None:
        super().__init__()
        self.claims: list[IdempotencyRecord] = []

    def claim(self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int) -> Any:
        self.claims.append(record)
        return super().claim(record, now_ms=now_ms, lease_cutoff_ms=lease_cutoff_ms)


def target(function: Callable[..., Any]) -> list[str]:
    """Return the options naming ``function`` as deployed in FUNCTION."""
    return ["--handler", f"{__name__}:{function.__qualname__}", "--function-name", FUNCTION]


def fixture(name: str) -> Any:
    return json.loads((EVENTS / name).read_text(encoding="utf-8"))


def orders_handler(event: Any, context: Any) -> dict[str, Any]:
    return {"statusCode": 201, "body": "{}"}


def charge(payment: Any) -> str:
    return "ch_1"


def payment_handler(record: Any, context: Any) -> None:
    return None


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"record_format": "native"},
        {"record_format": "powertools"},
        {"event_key_jmespath": "powertools_json(body).order_id", "hash_function": "sha1"},
        {"payload_validation_jmespath": "powertools_json(body).amount"},
    ],
    ids=["default", "native", "powertools", "jmespath-sha1", "validated"],
)
def test_idempotent_key_is_the_stored_one(
    key_of: Callable[..., Run], deployed: None, options: dict[str, str]
) -> None:
    """Default prefix, record format, hash and validation as ``@idempotent`` applies them."""
    spy = ClaimLog()
    config = IdempotencyConfig(**options)  # type: ignore[arg-type]
    event = {"body": json.dumps({"order_id": 7, "amount": 10})}
    idempotent(persistence_store=spy, config=config)(orders_handler)(event, None)
    (claim,) = spy.claims

    argv = [*target(orders_handler), "--json"]
    for option, flag in (
        ("record_format", "--record-format"),
        ("event_key_jmespath", "--jmespath"),
        ("payload_validation_jmespath", "--validation-jmespath"),
        ("hash_function", "--hash"),
    ):
        if option in options:
            argv += [flag, options[option]]
    run = key_of(event, *argv)

    assert (0, [{"key": claim.idempotency_key, "validation_hash": claim.payload_hash}]) == (
        run.code,
        run.lines(),
    )


def test_default_prefix_without_a_function_name_follows_the_record_format(
    key_of: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unset AWS_LAMBDA_FUNCTION_NAME: Powertools' format says test-func, the native local."""
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    for record_format, word in (("powertools", "test-func"), ("native", "local")):
        spy = ClaimLog()
        config = IdempotencyConfig(record_format=record_format)  # type: ignore[arg-type]
        idempotent(persistence_store=spy, config=config)(orders_handler)({"a": 1}, None)

        run = key_of(
            {"a": 1}, "--handler", f"{__name__}:orders_handler", "--record-format", record_format
        )

        assert (0, spy.claims[0].idempotency_key + "\n") == (run.code, run.out)
        assert run.out.startswith(f"{word}.{__name__}.orders_handler#")
        assert "key of a local run" in run.err


def test_idempotent_function_key_is_the_stored_one(
    key_of: Callable[..., Run], deployed: None
) -> None:
    """The event file is the payload; the key is the one ``idempotent_function`` stores."""
    spy = ClaimLog()
    config = IdempotencyConfig(event_key_jmespath="payment_id")
    decorated = idempotent_function(
        data_keyword_argument="payment", persistence_store=spy, config=config
    )(charge)
    decorated({"payment_id": "p-1", "amount": 5})

    run = key_of(
        {"payment_id": "p-1", "amount": 5},
        *target(charge),
        "--decorator",
        "idempotent_function",
        "--jmespath",
        "payment_id",
    )

    assert (0, spy.claims[0].idempotency_key + "\n") == (run.code, run.out)


@pytest.mark.parametrize(
    ("shape", "caller"),
    [
        ("apigateway-v1", None),
        ("apigateway-v1", ("cognito-user-pool", "user-1")),
        ("apigateway-v2", ("jwt", "user-2")),
        ("function-url", ("iam", "arn:aws:iam::123456789012:user/ana")),
        ("alb", None),
    ],
)
def test_http_key_is_scoped_as_the_adapter_scopes_it(
    key_of: Callable[..., Run],
    deployed: None,
    shape: str,
    caller: tuple[str, str] | None,
) -> None:
    """Method, route, API, stage and caller scope the key exactly as ``idempotent_http`` does."""
    spy = ClaimLog()
    event = make_event(shape, key="k-1", caller=caller)
    idempotent_http(persistence_store=spy)(orders_handler)(copy.deepcopy(event), None)
    (claim,) = spy.claims

    run = key_of(event, *target(orders_handler), "--decorator", "idempotent_http", "--json")

    assert (0, [{"key": claim.idempotency_key, "validation_hash": claim.payload_hash}]) == (
        run.code,
        run.lines(),
    )


def test_http_key_honours_header_caller_and_prefix_options(
    key_of: Callable[..., Run],
) -> None:
    """--header-name, --caller and --prefix are the adapter's header_name, caller, key_prefix."""
    spy = ClaimLog()
    event = make_event(
        "apigateway-v2", key="k-2", header_name="X-Key", caller=("lambda-authorizer", "u-9")
    )
    event["requestContext"]["authorizer"]["lambda"]["userId"] = "u-9"
    idempotent_http(
        persistence_store=spy,
        header_name="X-Key",
        caller="requestContext.authorizer.lambda.userId",
        key_prefix="orders",
    )(orders_handler)(copy.deepcopy(event), None)

    run = key_of(
        event,
        "--prefix",
        "orders",
        "--decorator",
        "idempotent_http",
        "--header-name",
        "X-Key",
        "--caller",
        "requestContext.authorizer.lambda.userId",
    )

    assert (0, f"key         {spy.claims[0].idempotency_key}\n") == (
        run.code,
        run.out.split("validation")[0],
    )


def test_http_refuses_an_event_without_its_request_context(key_of: Callable[..., Run]) -> None:
    """A hand-written event lacks what API Gateway adds and the key includes: no key, exit 2."""
    event = make_event("apigateway-v2", key="k-1")
    del event["requestContext"]["apiId"], event["requestContext"]["domainName"]
    del event["requestContext"]["stage"]

    run = key_of(event, "--prefix", "orders", "--decorator", "idempotent_http")

    assert (2, "") == (run.code, run.out)
    assert "requestContext.apiId, requestContext.stage, which this event lacks" in run.err


def test_http_refuses_a_caller_it_cannot_identify(key_of: Callable[..., Run]) -> None:
    """An HTTP API Lambda authorizer names no caller: the adapter answers 500, so no key."""
    event = make_event("apigateway-v2", key="k-1", caller=("lambda-authorizer", "u-1"))

    run = key_of(event, "--prefix", "orders", "--decorator", "idempotent_http")

    assert (2, "") == (run.code, run.out)
    assert "answers this event 500" in run.err
    assert "--caller" in run.err


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda event: None, "Idempotency-Key is missing"),
        (lambda event: event.update(httpMethod="GET"), "does not cover this request's method"),
    ],
    ids=["no-header", "safe-method"],
)
def test_http_without_a_key_says_why(
    key_of: Callable[..., Run], change: Callable[[dict[str, Any]], None], message: str
) -> None:
    """No header: the adapter answers 400; a GET runs unrecorded. Either way no key is printed."""
    event = make_event("apigateway-v1")
    change(event)

    run = key_of(event, "--prefix", "orders", "--decorator", "idempotent_http")

    assert ("", True) == (run.out, message in run.err)
    assert run.code in (1, 2)


def sqs_event(*records: dict[str, Any]) -> dict[str, Any]:
    return {"Records": list(records)}


def sqs_record(message_id: str, body: Any) -> dict[str, Any]:
    record: dict[str, Any] = copy.deepcopy(fixture("sqs_receive_message.json")["Records"][0])
    record.update(messageId=message_id, body=json.dumps(body))
    record["eventSourceARN"] = "arn:aws:sqs:us-east-1:123456789012:payments"
    return record


@pytest.mark.parametrize("jmespath", ["", "powertools_json(body).payment_id"])
def test_sqs_keys_are_the_stored_ones_one_per_record(
    key_of: Callable[..., Run], deployed: None, jmespath: str
) -> None:
    """A batch gets one line per record, in order, each the key the adapter claimed."""
    spy = ClaimLog()
    event = sqs_event(
        sqs_record("m-1", {"payment_id": "p-1"}), sqs_record("m-2", {"payment_id": "p-2"})
    )
    handler = idempotent_sqs_handler(
        persistence_store=spy,
        config=IdempotencyConfig(event_key_jmespath=jmespath),
        max_concurrency=1,
    )(payment_handler)
    assert {"batchItemFailures": []} == handler(copy.deepcopy(event), None)

    run = key_of(
        event,
        *target(payment_handler),
        "--decorator",
        "idempotent_sqs_handler",
        "--jmespath",
        jmespath,
    )

    assert (0, "".join(f"{claim.idempotency_key}\n" for claim in spy.claims)) == (run.code, run.out)
    assert 2 == len(set(run.out.split()))


def test_sqs_record_without_key_material_or_malformed(key_of: Callable[..., Run]) -> None:
    """A record whose expression finds nothing gets "-"; a malformed one is refused, by reason."""
    broken = sqs_record("m-3", {})
    del broken["body"]
    event = sqs_event(sqs_record("m-1", {"payment_id": "p-1"}), sqs_record("m-2", {}), broken)

    run = key_of(
        event,
        "--prefix",
        "payments",
        "--decorator",
        "idempotent_sqs_handler",
        "--jmespath",
        "powertools_json(body).payment_id",
        "--json",
    )

    first, empty, malformed = run.lines()
    assert 2 == run.code
    assert first["key"].startswith("payments#")
    assert (None, True) == (empty["key"], "finds nothing" in empty["reason"])
    assert (None, True) == (malformed["key"], "body is missing" in malformed["reason"])


def test_stream_keys_are_the_stored_ones(key_of: Callable[..., Run], deployed: None) -> None:
    """A DynamoDB Stream batch: item keys, sequence number and table, as the adapter stores."""
    spy = ClaimLog()
    event = fixture("dynamodb_stream_update.json")
    handler = idempotent_stream_handler(persistence_store=spy, max_concurrency=1)(payment_handler)
    assert {"batchItemFailures": []} == handler(copy.deepcopy(event), None)

    run = key_of(event, *target(payment_handler), "--decorator", "idempotent_stream_handler")

    assert (0, [c.idempotency_key for c in spy.claims]) == (run.code, run.out.split())


@pytest.mark.parametrize(
    ("jmespath", "self_managed"),
    [("", False), ("powertools_json(powertools_base64(value)).order_id", False), ("", True)],
    ids=["offsets", "business-key", "self-managed"],
)
def test_kafka_keys_are_the_stored_ones(
    key_of: Callable[..., Run], deployed: None, jmespath: str, self_managed: bool
) -> None:
    """A Kafka batch: one line per record, each the key ``idempotent_kafka_handler`` stored."""
    spy = ClaimLog()
    event = kafka_event(
        records=[
            {"partition": 0, "value": {"order_id": "o-1"}},
            {"partition": 1, "value": {"order_id": "o-2"}},
            {"partition": 0, "value": {"order_id": "o-3"}},
        ]
    )
    if self_managed:
        del event["eventSourceArn"]
        event["eventSource"] = "SelfManagedKafka"
    handler = idempotent_kafka_handler(
        persistence_store=spy, config=IdempotencyConfig(event_key_jmespath=jmespath)
    )(payment_handler)
    assert {"batchItemFailures": []} == handler(copy.deepcopy(event), None)

    run = key_of(
        event,
        *target(payment_handler),
        "--decorator",
        "idempotent_kafka_handler",
        "--jmespath",
        jmespath,
    )

    printed = run.out.split()
    assert (0, 3) == (run.code, len(set(printed)))
    assert sorted(claim.idempotency_key for claim in spy.claims) == sorted(printed)


def test_kafka_record_without_its_cluster_or_malformed_is_refused(
    key_of: Callable[..., Run],
) -> None:
    """No eventSourceArn: the key's scope is unknown; a record with bad headers is malformed."""
    event = kafka_event(records=[{"partition": 0}, {"partition": 1}])
    del event["eventSourceArn"]
    run = key_of(event, "--prefix", "p", "--decorator", "idempotent_kafka_handler", "--json")
    assert 2 == run.code
    assert all(line["key"] is None and "eventSourceArn" in line["reason"] for line in run.lines())

    event = kafka_event(records=[{"partition": 0}, {"partition": 1}])
    next(iter(event["records"].values()))[0]["headers"] = "x"
    run = key_of(event, "--prefix", "p", "--decorator", "idempotent_kafka_handler", "--json")
    broken, fine = run.lines()
    assert (2, None, True) == (run.code, broken["key"], fine["key"].startswith("p#"))
    assert "adapter fails this record" in broken["reason"]

    run = key_of({"records": {}}, "--prefix", "p", "--decorator", "idempotent_kafka_handler")
    assert (2, True) == (run.code, "records map of non-empty lists" in run.err)


def test_batch_record_without_its_source_is_refused(key_of: Callable[..., Run]) -> None:
    """A stream record's key includes its source's ARN: a record without one gets no key."""
    event = fixture("dynamodb_stream_update.json")
    del event["Records"][0]["eventSourceARN"]

    run = key_of(event, "--prefix", "p", "--decorator", "idempotent_stream_handler", "--json")

    missing, *rest = run.lines()
    assert 2 == run.code
    assert (None, True) == (missing["key"], "eventSourceARN" in missing["reason"])
    assert all(line["key"] for line in rest)


def test_batch_decorators_need_a_batch_event(key_of: Callable[..., Run]) -> None:
    """A single record, or anything without Records, is refused with what to pass instead."""
    run = key_of({"messageId": "m-1"}, "--prefix", "p", "--decorator", "idempotent_sqs_handler")
    assert (2, True) == (run.code, "non-empty Records list" in run.err)


def test_the_dry_run_ignores_the_disable_switch_and_prints_no_log_lines(
    key_of: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    """IDEMPOTENCY_DISABLED in the operator's shell does not empty the key; warnings stay quiet."""
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "1")
    run = key_of({"a": 1}, "--prefix", "p")
    assert (0, True, "") == (run.code, run.out.startswith("p#"), run.err)
    run = key_of({"a": 1}, "--prefix", "p", "--jmespath", "missing")
    assert 1 == run.code
    assert ["idempotent-lambda: error: " + "the key expression finds nothing"] == [
        line[: len("idempotent-lambda: error: the key expression finds nothing")]
        for line in run.err.splitlines()
    ]


def test_an_adapter_event_keyed_as_a_plain_handler_gets_a_note(key_of: Callable[..., Run]) -> None:
    """A batch or proxy event under the default --decorator idempotent: a hint on stderr."""
    for event in (sqs_event(sqs_record("m-1", {})), make_event("apigateway-v2", key="k")):
        run = key_of(event, "--prefix", "p")
        assert (0, True) == (run.code, "pass --decorator" in run.err)
    assert "" == key_of({"id": 1}, "--prefix", "p").err


def test_every_decorator_key_runs_leaves_its_settings_on_the_function() -> None:
    """What `key --handler` reads: the decorator's name, its options, the function's names."""
    store = InMemoryPersistenceLayer()
    config = IdempotencyConfig(event_key_jmespath="id")
    for name, adapter in ADAPTERS.items():
        decorator = adapter.load()
        assert decorator is not None
        extra = {"data_keyword_argument": "payment"} if name == "idempotent_function" else {}
        function = charge if extra else payment_handler
        decorated = decorator(persistence_store=store, config=config, key_prefix="p", **extra)(
            function
        )

        setup = setup_of(decorated)

        assert setup is not None
        assert (name, config, "p") == (
            setup.decorator,
            setup.options["config"],
            setup.options["key_prefix"],
        )
        assert (__name__, function.__qualname__) == (setup.module, setup.qualname)
    assert setup_of(payment_handler) is None
