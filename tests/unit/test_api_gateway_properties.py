"""Property: no event, however malformed, makes `idempotent_http` raise or answer 5xx itself,
except the one deliberate 500: an authenticated request whose caller cannot be read (fail
closed)."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from idempotent_lambda import IdempotencyConfig, InMemoryPersistenceLayer
from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests.events import http_events as ev

HANDLER_STATUS = 299  # only the handler answers with this; the adapter never does
ADAPTER_STATUSES = {400, 409, 422}

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
header_text = st.text(max_size=40) | st.sampled_from(["\x00", "\r\n", "k\x7f", "\t", '"', "\\"])
keys = (
    st.text(max_size=300)
    | st.text(
        alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=255
    )
    | st.builds(lambda n: "k" * n, st.integers(min_value=0, max_value=10_240))
    | st.builds(lambda s: f'"{s}"', st.text(max_size=30))
)
bodies = (
    st.none()
    | st.text(max_size=200)
    | st.builds(lambda n: '{"order_id": 1, "pad": "' + "x" * n + '"}', st.integers(0, 300_000))
    | st.builds(lambda b: base64.b64encode(b).decode(), st.binary(max_size=200))
    | st.sampled_from(["not base64!", "=", "YQ", "\udcff", "[" * 5000 + "]" * 5000, "{", "NaN"])
    | json_values
)


@st.composite
def mutated_events(draw: st.DrawFn) -> Any:
    """A real event of some shape with fields replaced by arbitrary, often wrong, values."""
    shape = draw(st.sampled_from(ev.SHAPES))
    event = ev.make_event(
        shape,
        key=draw(st.none() | keys),
        method=draw(st.sampled_from(["POST", "PUT", "GET", "post"])),
        path=draw(st.sampled_from(["/orders", "/", "/a/b"])),
        query=draw(
            st.dictionaries(
                st.text(max_size=5),
                st.lists(st.text(max_size=5), min_size=1, max_size=2),
                max_size=3,
            )
        ),
        headers=draw(st.dictionaries(header_text, header_text, max_size=3)),
    )
    event["body"] = draw(bodies)
    event["isBase64Encoded"] = draw(st.sampled_from([False, False, False, True, None, "true", 1]))
    if event["isBase64Encoded"] is True and draw(st.booleans()):
        raw = draw(st.binary(max_size=100) | st.text(max_size=100).map(str.encode))
        event["body"] = base64.b64encode(raw).decode()
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2, 3]))):
        target = event
        path = draw(
            st.sampled_from(
                [
                    ("headers",),
                    ("multiValueHeaders",),
                    ("requestContext",),
                    ("requestContext", "http"),
                    ("requestContext", "authorizer"),
                    ("requestContext", "identity"),
                    ("httpMethod",),
                    ("path",),
                    ("rawPath",),
                    ("routeKey",),
                    ("resource",),
                    ("rawQueryString",),
                    ("queryStringParameters",),
                    ("multiValueQueryStringParameters",),
                    ("version",),
                    ("cookies",),
                ]
            )
        )
        for step in path[:-1]:
            nested = target.get(step)
            if not isinstance(nested, dict):
                break
            target = nested
        else:
            target[path[-1]] = draw(json_values)
    return event


events = st.one_of(mutated_events(), mutated_events(), mutated_events(), json_values)


def make_handler(config: IdempotencyConfig | None = None, **options: Any) -> Any:
    """Return a decorated handler that always answers ``HANDLER_STATUS``."""
    store = InMemoryPersistenceLayer(clock=ManualClock())

    @idempotent_http(persistence_store=store, config=config, **options)
    def handler(event: Any, context: Any) -> dict[str, Any]:
        return {"statusCode": HANDLER_STATUS, "body": ""}

    return handler


def check(response: Any) -> None:
    """Assert ``response`` is the handler's, one of the adapter's 4xx problems, or its refusal of
    an authenticated request without a readable caller."""
    assert isinstance(response, dict)
    if response["statusCode"] == 500:
        assert "caller could not be identified" in json.loads(response["body"])["detail"]
        return
    assert response["statusCode"] == HANDLER_STATUS or response["statusCode"] in ADAPTER_STATUSES


PLAIN = make_handler()
OPTIONAL_WITH_EXPRESSIONS = make_handler(
    IdempotencyConfig(
        event_key_jmespath="powertools_json(body).order_id",
        payload_validation_jmespath="[body.amount, headers]",
    ),
    require_key=False,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event=events)
@example(event=float("nan"))
@example(event={"body": float("nan"), "headers": {"Idempotency-Key": "k"}})
def test_arbitrary_events_never_make_the_adapter_raise_or_answer_5xx(event: Any) -> None:
    """Any event: the handler's response, a 400/409/422 problem or the fail-closed 500; twice in
    a row too."""
    snapshot = copy.deepcopy(event)
    for handler in (PLAIN, OPTIONAL_WITH_EXPRESSIONS):
        check(handler(event, FakeLambdaContext()))
        check(handler(event, None))
    # repr, not ==: an event may hold nan (or be nan), which is never equal to itself
    assert repr(snapshot) == repr(event)  # the adapter never edits the event


ASYNC_STORE = InMemoryPersistenceLayer(clock=ManualClock())


@idempotent_http(persistence_store=ASYNC_STORE)
async def async_handler(event: Any, context: Any) -> dict[str, Any]:
    """Always answers ``HANDLER_STATUS``."""
    return {"statusCode": HANDLER_STATUS, "body": ""}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event=events)
def test_arbitrary_events_never_break_async_handlers(event: Any) -> None:
    """The same holds for ``async def`` handlers."""
    check(asyncio.run(async_handler(event, None)))
