"""Hostile and malformed input: fuzz key derivation and every adapter with hypothesis.

The only acceptable outcomes are: the handler's result, a typed `IdempotencyError`, a 4xx
``application/problem+json`` response (HTTP), or per-record batch failures whose logged cause
is a typed error (SQS, stream). Never an unhandled exception, never a hang: a watchdog
(SIGALRM) fails any example that runs for more than `WATCHDOG_S` seconds.

Inputs: random JSON of every shape, values of the wrong type, huge bodies (1 MiB), invalid
base64, bodies that are not UTF-8, 100,000-deep nesting (lists, objects, JSON text), control
characters in header names and values, 10 KB idempotency keys. Results that cannot be stored
(too large, not serialisable) are checked at the end: typed error, record not stuck, and the
retry behaviour documented in docs/reliability.md.

Budgets: `FAST_EXAMPLES` per property in the fast suite; the ``slow`` run multiplies them (the
examples actually tried are counted and printed, and recorded in docs/reliability.md).
"""

from __future__ import annotations

import base64
import collections
import decimal
import gzip
import json
import os
import string
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from idempotent_lambda import (
    IdempotencyConfig,
    IdempotencyError,
    IdempotencyKeyError,
    IdempotencyUnstorableResultError,
    InMemoryPersistenceLayer,
    Status,
    idempotent,
    idempotent_function,
)
from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.adapters.dynamodb_stream import (
    DynamoDBStreamRecord,
    idempotent_stream_handler,
)
from idempotent_lambda.adapters.sqs import MalformedEventError, SQSRecord, idempotent_sqs_handler
from idempotent_lambda.persistence.base import store_for_format
from idempotent_lambda.testing import FakeLambdaContext
from tests.events import http_events as ev
from tests.reliability._support import SECRET, Executions, outcome_of, watchdog

FAST_EXAMPLES = int(os.environ.get("RELIABILITY_FUZZ_EXAMPLES", "60"))
SLOW_FACTOR = 50
DEEP = 100_000
TRIED: collections.Counter[str] = collections.Counter()


def event_note(label: str) -> None:
    """Count ``label`` in hypothesis' statistics (``--hypothesis-show-statistics``)."""
    if currently_in_test_context():
        event(label)


def _typed_error_names() -> frozenset[str]:
    names, todo = set(), [IdempotencyError]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return frozenset(names)


def budget(name: str, factor: int = 1) -> Callable[[Any], Any]:
    return settings(
        max_examples=FAST_EXAMPLES * factor,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.function_scoped_fixture,
            HealthCheck.large_base_example,
        ],
    )


def deep_list(depth: int = DEEP) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def deep_dict(depth: int = DEEP) -> Any:
    value: Any = {}
    for _ in range(depth):
        value = {"a": value}
    return value


# --- strategies ----------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=50)
    | st.decimals(allow_nan=True, allow_infinity=True)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5)
    ),
    max_leaves=25,
)
odd_values = (
    json_values
    | st.binary(max_size=50)
    | st.sets(st.integers(), max_size=5)
    | st.tuples(st.integers(), st.text(max_size=5))
    | st.datetimes()
    | st.uuids()
    | st.builds(object)
    | st.dictionaries(st.integers() | st.floats() | st.none(), st.integers(), max_size=3)
)
control_text = st.text(
    alphabet=st.characters(codec="utf-8") | st.sampled_from("\x00\r\n\t\x7f\x1b\u2028\ud800"),
    max_size=40,
)
not_utf8 = st.binary(min_size=1, max_size=64).filter(lambda b: not _is_utf8(b))
bodies = st.one_of(
    st.none(),
    json_values.map(lambda v: json.dumps(v, default=str)),
    control_text,
    st.just("x" * (1 << 20)),  # 1 MiB
    st.just("[" * DEEP + "]" * DEEP),
    st.just('{"a":' * DEEP + "1" + "}" * DEEP),
    st.integers(),
    st.lists(st.text(max_size=3), max_size=3),
)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# --- core key derivation -------------------------------------------------------------------

CORE_CONFIGS = [
    IdempotencyConfig(),
    IdempotencyConfig(raise_on_no_idempotency_key=True),
    IdempotencyConfig(event_key_jmespath="order_id", raise_on_no_idempotency_key=True),
    IdempotencyConfig(event_key_jmespath="powertools_json(body).id"),
    IdempotencyConfig(event_key_jmespath="powertools_base64(body)"),
    IdempotencyConfig(event_key_jmespath="powertools_base64_gzip(body)"),
    IdempotencyConfig(event_key_jmespath="[*].id", payload_validation_jmespath="@"),
    IdempotencyConfig(hash_function="md5", payload_validation_jmespath="amount"),
]


def core_handlers() -> list[Any]:
    store = InMemoryPersistenceLayer()
    handlers = []
    for n, config in enumerate(CORE_CONFIGS):

        @idempotent(persistence_store=store, config=config, key_prefix=f"fuzz-{n}")
        def handler(event: Any, context: Any) -> Any:
            return {"ok": True, "card": SECRET}

        handlers.append(handler)
    return handlers


CORE = core_handlers()


def assert_core_outcome(call: Callable[[], Any]) -> str:
    with watchdog():
        kind, value = outcome_of(call)
    event_note(f"core {kind}")
    assert kind == "result" or isinstance(value, IdempotencyError), (kind, value)
    if kind == "result":
        assert {"ok": True, "card": SECRET} == value
    return kind


payload_with_body = st.fixed_dictionaries(
    {"body": bodies | st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode())},
    optional={"order_id": odd_values, "id": odd_values, "amount": odd_values},
)


@budget("core")
@given(payload=odd_values | payload_with_body | st.lists(payload_with_body, max_size=3))
def test_key_derivation_on_random_payloads(payload: Any) -> None:
    """Any payload: the result, or a typed error (`IdempotencyKeyError`)."""
    for handler in CORE:
        TRIED["core"] += 1
        assert_core_outcome(lambda handler=handler: handler(payload, None))


@pytest.mark.parametrize(
    "payload",
    [
        deep_list(),
        deep_dict(),
        {"order_id": deep_list(), "body": "[" * DEEP + "]" * DEEP},
        [{"id": deep_dict()}],
        {"body": base64.b64encode(gzip.compress(b"[" * DEEP + b"]" * DEEP)).decode()},
    ],
    ids=["list", "dict", "json-text", "under-a-list", "gzip"],
)
def test_deep_nesting_is_a_typed_error_not_a_crash(payload: Any) -> None:
    """100,000 levels: `IdempotencyKeyError` (or no key), never RecursionError or a crash."""
    kinds = {assert_core_outcome(lambda h=handler: h(payload, None)) for handler in CORE}
    assert kinds <= {"result", "IdempotencyKeyError"}


def test_deep_nesting_through_idempotent_function() -> None:
    """The same through `idempotent_function` with a 100,000-deep argument."""

    @idempotent_function(
        data_keyword_argument="order", persistence_store=InMemoryPersistenceLayer()
    )
    def process(order: Any) -> str:
        return "done"

    with watchdog(), pytest.raises(IdempotencyKeyError):
        process(deep_list())


def test_hash_is_the_formats_own_and_sha256_natively() -> None:
    """Key hygiene: hex digests; md5 (32 chars) by default, as Powertools; sha256 (64) natively.

    md5 is the default only because Powertools' records are keyed with it; set
    ``hash_function="sha256"`` (or the native format) on tables no Powertools code shares.
    """
    store = InMemoryPersistenceLayer()
    keys: list[str] = []
    hook = {"decision_hook": lambda decision: keys.append(decision.key)}
    for prefix, config in (
        ("default", IdempotencyConfig(**hook)),
        ("native", IdempotencyConfig(record_format="native", **hook)),
        ("sha256", IdempotencyConfig(hash_function="sha256", **hook)),
        ("native-md5", IdempotencyConfig(record_format="native", hash_function="md5", **hook)),
    ):

        @idempotent(persistence_store=store, config=config, key_prefix=f"hash-{prefix}")
        def handler(event: Any, context: Any) -> str:
            return "ok"

        handler({"card": SECRET}, None)
    digests = [key.split("#", 1)[1] for key in keys]
    assert [32, 64, 64, 32] == [len(digest) for digest in digests]
    assert all(set(digest) <= set("0123456789abcdef") for digest in digests)
    assert all(store.get(key) is not None for key in keys)


# --- HTTP adapter --------------------------------------------------------------------------

PROBLEM_STATUSES = {400, 409, 422}


def http_handlers() -> list[Any]:
    store = InMemoryPersistenceLayer()
    variants = [
        {},
        {"require_key": False, "config": IdempotencyConfig(event_key_jmespath="body.order_id")},
        {"config": IdempotencyConfig(payload_validation_jmespath="body.amount")},
        {"header_name": "X-Request-Key", "require_key": False},
    ]
    handlers = []
    for n, options in enumerate(variants):

        @idempotent_http(persistence_store=store, key_prefix=f"http-{n}", **options)
        def handler(event: Any, context: Any) -> dict[str, Any]:
            return {"statusCode": 201, "body": json.dumps({"card": SECRET})}

        handlers.append(handler)
    return handlers


HTTP = http_handlers()


def assert_http_outcome(event: Any) -> None:
    for handler in HTTP:
        TRIED["http"] += 1
        with watchdog():
            kind, response = outcome_of(lambda h=handler: h(event, FakeLambdaContext(30_000)))
        assert "result" == kind, (kind, response)
        assert isinstance(response, dict)
        status = response["statusCode"]
        event_note(f"http {status}")
        if status == 201:
            continue
        assert status in PROBLEM_STATUSES, status
        headers = response.get("headers") or {
            k: v[-1] for k, v in (response.get("multiValueHeaders") or {}).items()
        }
        assert "application/problem+json" == headers["Content-Type"]
        problem = json.loads(response["body"])
        assert {"type", "title", "status", "detail"} <= set(problem)
        assert status == problem["status"]
        assert SECRET not in response["body"]


keys = st.one_of(
    st.text(alphabet=string.printable, max_size=300),
    control_text,
    st.just("k" * 10_240),
    st.just('"quoted\\"key";param=1'),
    st.just('"unterminated'),
    st.integers(),
    st.none(),
    st.lists(st.text(max_size=5), max_size=3),
)


@st.composite
def http_events(draw: st.DrawFn) -> Any:
    shape = draw(st.sampled_from(ev.SHAPES))
    event = ev.make_event(
        shape,
        key=draw(st.text(alphabet=string.ascii_letters, min_size=1, max_size=8)),
        body=json.dumps({"order_id": draw(odd_values.map(str)), "amount": 1, "card": SECRET}),
    )
    header_field = "multiValueHeaders" if shape in ev.MULTI_VALUE_SHAPES else "headers"
    for _ in range(draw(st.integers(0, 4))):
        target = draw(
            st.sampled_from(["key", "header", "body", "b64", "context", "field", "headers"])
        )
        if target == "key":
            value = draw(keys)
            name = draw(st.sampled_from(["Idempotency-Key", "idempotency-key", "IDEMPOTENCY-KEY"]))
            event.setdefault(header_field, {})
            if isinstance(event[header_field], dict):
                event[header_field][name] = (
                    [value] if header_field == "multiValueHeaders" else value
                )
        elif target == "header":
            if isinstance(event.get(header_field), dict):
                event[header_field][draw(control_text)] = draw(control_text | st.none())
        elif target == "body":
            event["body"] = draw(bodies)
        elif target == "b64":
            event["isBase64Encoded"] = draw(st.booleans() | st.none() | st.text(max_size=3))
            event["body"] = draw(
                st.text(max_size=40)  # mostly invalid base64
                | not_utf8.map(lambda b: base64.b64encode(b).decode())
                | st.just("\u00e9\u00e9==")
            )
        elif target == "context":
            event["requestContext"] = draw(
                json_values
                | st.fixed_dictionaries(
                    {"authorizer": json_values, "identity": json_values, "http": json_values}
                )
            )
        elif target == "field":
            field = draw(
                st.sampled_from(
                    [
                        "httpMethod",
                        "path",
                        "rawPath",
                        "resource",
                        "routeKey",
                        "version",
                        "queryStringParameters",
                        "multiValueQueryStringParameters",
                        "rawQueryString",
                    ]
                )
            )
            event[field] = draw(json_values)
        else:
            event[header_field] = draw(json_values)
    return event


@budget("http")
@given(event=http_events() | json_values)
def test_http_adapter_answers_hostile_requests_with_4xx_problems(event: Any) -> None:
    """Any request: the handler's 201, or a 400/409/422 problem response; never an exception."""
    assert_http_outcome(event)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda e: e["headers"].__setitem__("idempotency-key", "k" * 10_240),
        lambda e: e["headers"].__setitem__("idempotency-key", "ok\r\nInjected: 1"),
        lambda e: e["headers"].__setitem__("idem\x00potency-key", "k"),
        lambda e: e.__setitem__("body", "[" * DEEP + "]" * DEEP),
        lambda e: e.update(isBase64Encoded=True, body="%%%not base64%%%"),
        lambda e: e.update(isBase64Encoded=True, body=base64.b64encode(b"\xff\xfe\x00").decode()),
        lambda e: e.__setitem__("body", "x" * (8 << 20)),
    ],
    ids=[
        "10KB-key",
        "CRLF-in-key",
        "NUL-in-header-name",
        "deep-body",
        "bad-base64",
        "not-utf8",
        "8MiB-body",
    ],
)
def test_named_hostile_requests(mutate: Callable[[dict[str, Any]], None]) -> None:
    """The named cases, on an HTTP API event: 201 or a 4xx problem, within the watchdog."""
    event = ev.make_event("apigateway-v2", key="named-1")
    mutate(event)
    assert_http_outcome(event)


# --- batch adapters ------------------------------------------------------------------------

TYPED = _typed_error_names()


class HandlerError(Exception):
    """The record handler's own failure (allowed: it is the handler's, not the library's)."""


def sqs_handlers() -> list[Any]:
    store = InMemoryPersistenceLayer()
    handlers = []
    for n, config in enumerate(
        [None, IdempotencyConfig(event_key_jmespath="powertools_json(body).order_id")]
    ):

        @idempotent_sqs_handler(persistence_store=store, config=config, key_prefix=f"sqs-{n}")
        def handle(record: SQSRecord, context: Any) -> dict[str, Any]:
            if record.body == "raise":
                raise HandlerError("asked to")
            return {"length": len(record.body), "card": SECRET}

        handlers.append(handle)
    return handlers


def stream_handlers() -> list[Any]:
    store = InMemoryPersistenceLayer()
    handlers = []
    for n, config in enumerate(
        [None, IdempotencyConfig(event_key_jmespath="dynamodb.NewImage.version.N")]
    ):

        @idempotent_stream_handler(persistence_store=store, config=config, key_prefix=f"st-{n}")
        def handle(record: DynamoDBStreamRecord, context: Any) -> str:
            if record.event_id == "raise":
                raise HandlerError("asked to")
            return SECRET

        handlers.append(handle)
    return handlers


SQS, STREAM = sqs_handlers(), stream_handlers()


def assert_batch_outcome(handlers: list[Any], event: Any, caplog: pytest.LogCaptureFixture) -> None:
    records = event.get("Records") if isinstance(event, dict) else None
    for handle in handlers:
        TRIED["batch"] += 1
        caplog.clear()
        with watchdog():
            kind, response = outcome_of(lambda h=handle: h(event, FakeLambdaContext(60_000)))
        event_note(f"batch {kind}")
        if kind != "result":
            assert isinstance(response, MalformedEventError), (kind, response)
            assert not isinstance(records, list)
            continue
        assert isinstance(records, list)
        failures = [item["itemIdentifier"] for item in response["batchItemFailures"]]
        assert all(isinstance(identifier, str) for identifier in failures)
        causes = {
            getattr(record, "idempotency_batch", {}).get("error")
            for record in caplog.records
            if getattr(record, "idempotency_batch", None)
        } - {None}
        assert causes <= TYPED | {"HandlerError"}, causes
        for cause in causes:
            event_note(f"record failed: {cause}")


@st.composite
def sqs_records(draw: st.DrawFn) -> Any:
    record = json.loads(json.dumps(SQS_TEMPLATE))
    record["messageId"] = draw(st.text(min_size=1, max_size=10) | odd_values.map(str))
    record["body"] = draw(
        st.sampled_from(["raise", '{"order_id": 1}'])
        | bodies.map(lambda b: b if isinstance(b, str) else json.dumps(b))
        | json_values.map(lambda v: json.dumps({"order_id": v}, default=str))
    )
    for _ in range(draw(st.integers(0, 3))):
        field = draw(
            st.sampled_from(
                ["messageId", "body", "attributes", "messageAttributes", "eventSourceARN"]
            )
        )
        record[field] = draw(
            json_values
            | st.just({"a": {"dataType": "Binary", "binaryValue": "!!not base64"}})
            | st.just("arn:aws:sqs:us-east-1:1:q.fifo")
        )
    return record


SQS_TEMPLATE = {
    "messageId": "m-1",
    "receiptHandle": "rh",
    "body": "{}",
    "attributes": {"ApproximateReceiveCount": "1", "MessageGroupId": "g"},
    "messageAttributes": {},
    "md5OfBody": "0",
    "eventSource": "aws:sqs",
    "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q",
    "awsRegion": "us-east-1",
}


@budget("sqs")
@given(
    event=st.fixed_dictionaries({"Records": st.lists(sqs_records() | json_values, max_size=6)})
    | json_values
)
def test_sqs_adapter_fails_hostile_records_one_by_one(
    event: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Any SQS event: per-record failures with typed causes, or `MalformedEventError`."""
    assert_batch_outcome(SQS, event, caplog)


attribute_values = st.recursive(
    st.fixed_dictionaries({"S": st.text(max_size=5)})
    | st.fixed_dictionaries({"N": st.sampled_from(["1", "1.5", "NaN", "x", "1e999", ""])})
    | st.fixed_dictionaries({"B": st.sampled_from(["AAE=", "!!", ""])})
    | st.fixed_dictionaries({"BOOL": json_values})
    | st.fixed_dictionaries({"NULL": st.booleans()})
    | st.fixed_dictionaries({"SS": st.lists(st.text(max_size=3), max_size=3)})
    | st.fixed_dictionaries({"ZZ": json_values})
    | json_values,
    lambda inner: (
        st.fixed_dictionaries({"L": st.lists(inner, max_size=3)})
        | st.fixed_dictionaries({"M": st.dictionaries(st.text(max_size=3), inner, max_size=3)})
    ),
    max_leaves=10,
)


def mostly(valid: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]) -> Any:
    """Valid three times out of four, so records get past parsing often enough."""
    return st.one_of(valid, valid, valid, hostile)


good_attributes = st.dictionaries(
    st.text(min_size=1, max_size=3), st.fixed_dictionaries({"S": st.text(max_size=5)}), max_size=2
)


@st.composite
def stream_records(draw: st.DrawFn) -> Any:
    record: dict[str, Any] = {
        "eventID": draw(mostly(st.sampled_from(["e-1", "raise"]), json_values)),
        "eventName": draw(mostly(st.sampled_from(["INSERT", "MODIFY", "REMOVE"]), json_values)),
        "eventSource": "aws:dynamodb",
        "eventSourceARN": draw(
            mostly(st.just("arn:aws:dynamodb:us-east-1:1:table/t/stream/2026"), json_values)
        ),
        "dynamodb": {
            "Keys": draw(
                mostly(
                    good_attributes,
                    st.dictionaries(st.text(max_size=3), attribute_values, max_size=2),
                )
            ),
            "NewImage": draw(
                mostly(
                    good_attributes,
                    st.dictionaries(st.text(max_size=3), attribute_values, max_size=3)
                    | json_values,
                )
            ),
            "SequenceNumber": draw(
                mostly(st.from_regex(r"[0-9]{1,21}", fullmatch=True), json_values)
            ),
            "StreamViewType": "NEW_IMAGE",
            "ApproximateCreationDateTime": draw(mostly(st.integers(0, 2**31), json_values)),
        },
        "userIdentity": draw(
            st.just({"type": "Service", "principalId": "dynamodb.amazonaws.com"}) | json_values
        ),
    }
    if draw(st.integers(0, 5)) == 0:
        record["dynamodb"]["Keys"] = {"pk": {"M": deep_attribute()}}
    if draw(st.integers(0, 5)) == 0:
        record["dynamodb"] = draw(json_values)
    return record


def deep_attribute(depth: int = 20_000) -> Any:
    value: Any = {"S": "leaf"}
    for _ in range(depth):
        value = {"M": {"a": value}}
    return value["M"]


@budget("stream")
@given(
    event=st.fixed_dictionaries({"Records": st.lists(stream_records() | json_values, max_size=5)})
    | json_values
)
def test_stream_adapter_fails_hostile_records_in_order(
    event: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Any stream event: per-record failures with typed causes, or `MalformedEventError`."""
    assert_batch_outcome(STREAM, event, caplog)


def test_stream_event_name_of_an_unhashable_type_is_a_malformed_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Regression: ``eventName: []`` failed the record with a bare TypeError."""
    record = {
        "eventID": "e-1",
        "eventName": [],
        "dynamodb": {"Keys": {"pk": {"S": "a"}}, "SequenceNumber": "1"},
    }
    response = STREAM[0]({"Records": [record]}, FakeLambdaContext(60_000))
    assert [{"itemIdentifier": "1"}] == response["batchItemFailures"]
    causes = [getattr(r, "idempotency_batch", {}).get("error") for r in caplog.records]
    assert "MalformedRecordError" in causes


# --- results that cannot be stored ---------------------------------------------------------


class Opaque:
    """Not serialisable."""


@pytest.mark.parametrize(
    "result",
    [
        Opaque(),
        {"when": decimal.Decimal("1"), "what": Opaque()},
        os.urandom(420 * 1024).hex(),  # incompressible: > 400 KB after zlib
        deep_list(5_000),
    ],
    ids=["object", "nested-object", "too-large", "too-deep"],
)
@pytest.mark.parametrize("store_kind", ["in-memory", "dynamodb"])
def test_unstorable_result_is_typed_and_never_runs_twice(
    result: Any, store_kind: str, request: pytest.FixtureRequest
) -> None:
    """Typed error; the record is COMPLETED with a marker (not stuck); retries raise it too."""
    store = (
        InMemoryPersistenceLayer()
        if store_kind == "in-memory"
        else request.getfixturevalue("dynamodb_store")
    )
    executions = Executions()
    keys: set[str | None] = set()
    config = IdempotencyConfig(decision_hook=lambda decision: keys.add(decision.key))

    @idempotent(persistence_store=store, config=config, key_prefix="unstorable")
    def handler(event: Any, context: Any) -> Any:
        executions("run")
        return result

    for _ in range(3):
        with watchdog(), pytest.raises(IdempotencyUnstorableResultError) as raised:
            handler({"card": SECRET}, None)
        assert SECRET not in str(raised.value)
    assert 1 == executions.total
    [key] = keys
    assert key is not None
    record = store_for_format(store, config.record_format).get(key)
    assert record is not None
    assert Status.COMPLETED is record.status


@pytest.mark.slow
@pytest.mark.parametrize(
    "test",
    [
        test_key_derivation_on_random_payloads,
        test_http_adapter_answers_hostile_requests_with_4xx_problems,
        test_sqs_adapter_fails_hostile_records_one_by_one,
        test_stream_adapter_fails_hostile_records_in_order,
    ],
    ids=["core", "http", "sqs", "stream"],
)
def test_large_fuzzing_budget(test: Any, caplog: pytest.LogCaptureFixture) -> None:
    """The same properties with `SLOW_FACTOR` times the examples (figures in the docs)."""
    inner = test.hypothesis.inner_test
    before = sum(TRIED.values())
    runner = budget("slow", SLOW_FACTOR)(given(**test.hypothesis._given_kwargs)(inner))
    if "caplog" in inner.__code__.co_varnames[: inner.__code__.co_argcount]:
        runner(caplog=caplog)
    else:
        runner()
    figures = {
        "run": "fuzz",
        "test": test.__name__,
        "max_examples": FAST_EXAMPLES * SLOW_FACTOR,
        "handler_calls": sum(TRIED.values()) - before,
    }
    print(f"RELIABILITY-FIGURES {json.dumps(figures)}")
