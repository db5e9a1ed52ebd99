"""`idempotent_http`: no cookie is replayed, repeated key headers read alike on every shape, and
the fingerprint tells apart requests that differ in their raw query or their Content-Type."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from idempotent_lambda import IdempotencyConfig, InMemoryPersistenceLayer
from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.exceptions import IdempotencyPersistenceConfigError
from tests.events import http_events as ev
from tests.unit._doubles import Decisions

SESSION = {
    "statusCode": 201,
    "headers": {"Location": "/orders/1", "Set-Cookie": "session=alice-secret"},
    "multiValueHeaders": {"set-cookie": ["session=alice-secret", "csrf=1"], "Vary": ["Origin"]},
    "cookies": ["session=alice-secret; Secure; HttpOnly"],
    "body": "created",
}


@pytest.fixture(params=ev.SHAPES)
def shape(request: pytest.FixtureRequest) -> str:
    """Every event shape the adapter accepts."""
    return str(request.param)


def cookie_handler(store: Any, **options: Any) -> Any:
    @idempotent_http(persistence_store=store, **options)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return dict(SESSION)

    return handler


def test_cookies_reach_the_first_caller_but_are_not_stored(
    shape: str, idempotency_store: Any
) -> None:
    """The first response is untouched; the replay carries no Set-Cookie and no v2 cookies."""
    handler = cookie_handler(idempotency_store)
    first = handler(ev.make_event(shape, key="k"), None)
    assert SESSION == first
    replay = handler(ev.make_event(shape, key="k"), None)
    assert "alice-secret" not in repr(replay)
    assert "cookies" not in replay
    assert ["/orders/1"] == ev.header(replay, "Location")
    assert ["Origin"] == ev.header(replay, "Vary")
    assert ["true"] == ev.header(replay, "Idempotent-Replayed")


def test_store_cookies_keeps_them_when_asked(shape: str, idempotency_store: Any) -> None:
    """``store_cookies=True`` is the explicit opt-in: the replay carries the cookies."""
    handler = cookie_handler(idempotency_store, store_cookies=True)
    handler(ev.make_event(shape, key="k"), None)
    replay = handler(ev.make_event(shape, key="k"), None)
    assert SESSION["cookies"] == replay["cookies"]
    assert "session=alice-secret" in ev.header(replay, "Set-Cookie")


class Runs:
    """A decorated handler counting its runs."""

    def __init__(self, store: Any) -> None:
        self.runs = 0

        @idempotent_http(persistence_store=store)
        def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
            self.runs += 1
            return {"statusCode": 201, "body": str(self.runs)}

        self.handler = handler

    def __call__(self, event: Any) -> dict[str, Any]:
        response: dict[str, Any] = self.handler(event, None)
        return response


# --- repeated key headers (issue 11, defect 9) -------------------------------------------------


def repeated(shape: str, first: str, second: str) -> dict[str, Any]:
    """An event whose key header was sent twice, delivered as the shape delivers it."""
    event = ev.make_event(shape, key=first)
    if shape in ev.V2_SHAPES:
        event["headers"]["idempotency-key"] = f"{first},{second}"  # HTTP API joins with commas
    elif shape == "alb":
        pytest.skip("ALB without multi-value headers passes only the last value")
    else:
        event["multiValueHeaders"]["Idempotency-Key"] = [first, second]
    return event


def test_a_repeated_key_with_two_values_is_a_400_on_every_shape(
    shape: str, idempotency_store: Any
) -> None:
    """Two different keys in one request: 400, whether listed or comma-joined."""
    handler = Runs(idempotency_store)
    response = handler(repeated(shape, "k-1", "k-2"))
    assert 400 == response["statusCode"]
    assert "more than once" in ev.problem(response)["detail"]
    assert 0 == handler.runs


def test_a_repeated_key_with_one_value_is_that_key_on_every_shape(
    shape: str, idempotency_store: Any
) -> None:
    """The same key twice (``k-1,k-1`` on v2) names the record of ``k-1``."""
    handler = Runs(idempotency_store)
    handler(ev.make_event(shape, key="k-1"))
    assert "1" == handler(repeated(shape, "k-1", "k-1"))["body"]
    assert 1 == handler.runs


@pytest.mark.parametrize("shape", ev.SHAPES)
def test_a_quoted_key_may_hold_a_comma(shape: str, idempotency_store: Any) -> None:
    """Only a comma outside a quoted string separates keys."""
    handler = Runs(idempotency_store)
    handler(ev.make_event(shape, key='"a,b"'))
    assert "1" == handler(ev.make_event(shape, key='"a,b"'))["body"]
    assert 400 == handler(ev.make_event(shape, key="a,b"))["statusCode"]


# --- fingerprint ------------------------------------------------------------------------------


def with_raw_query(shape: str, raw: str) -> dict[str, Any]:
    """A v2 event with ``raw`` as its rawQueryString (and the parameters HTTP API derives)."""
    event = ev.make_event(shape, key="k")
    event["rawQueryString"] = raw
    return event


@pytest.mark.parametrize("shape", ev.V2_SHAPES)
@pytest.mark.parametrize(
    ("first", "second"),
    [("q=%FF", "q=%FE"), ("q=a+b", "q=a%20b"), ("q=a+b", "q=a%2Bb"), ("q=%C3%A9", "q=%E9")],
)
def test_raw_query_bytes_are_fingerprinted_as_sent(
    shape: str, idempotency_store: Any, first: str, second: str
) -> None:
    """Undecodable bytes do not collapse to U+FFFD, and ``+`` is not read as a space: 422."""
    handler = Runs(idempotency_store)
    handler(with_raw_query(shape, first))
    assert 422 == handler(with_raw_query(shape, second))["statusCode"]
    assert "1" == handler(with_raw_query(shape, first))["body"]


@pytest.mark.parametrize("shape", ev.V2_SHAPES)
def test_raw_query_parameter_order_does_not_matter(shape: str, idempotency_store: Any) -> None:
    """Reordered parameters are the same request; the order of one name's values is kept."""
    handler = Runs(idempotency_store)
    handler(with_raw_query(shape, "a=1&b=2&a=3"))
    assert "1" == handler(with_raw_query(shape, "b=2&a=1&a=3"))["body"]
    assert 422 == handler(with_raw_query(shape, "b=2&a=3&a=1"))["statusCode"]


@pytest.mark.parametrize("shape", ["alb", "alb-multivalue"])
def test_alb_query_values_stay_percent_encoded(shape: str, idempotency_store: Any) -> None:
    """ALB passes values undecoded: ``%FF`` and ``%FE`` differ there too."""
    handler = Runs(idempotency_store)
    first, second = ev.make_event(shape, key="k"), ev.make_event(shape, key="k")
    field = "queryStringParameters" if shape == "alb" else "multiValueQueryStringParameters"
    first[field] = {"q": "%FF"} if shape == "alb" else {"q": ["%FF"]}
    second[field] = {"q": "%FE"} if shape == "alb" else {"q": ["%FE"]}
    handler(first)
    assert 422 == handler(second)["statusCode"]


def test_content_type_is_part_of_the_fingerprint(shape: str, idempotency_store: Any) -> None:
    """The same bytes as JSON and as form data are two requests: 422."""
    handler = Runs(idempotency_store)
    body = "a=1"
    handler(ev.make_event(shape, key="k", body=body, headers={"Content-Type": "text/plain"}))
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    assert 422 == handler(ev.make_event(shape, key="k", body=body, headers=form))["statusCode"]


# --- misconfiguration and missing keys (issue 20) ---------------------------------------------


class MisconfiguredStore:
    """A store whose client cannot be built: no region, as botocore reports it."""

    def __init__(self) -> None:
        self._inner = InMemoryPersistenceLayer()
        self.clock = self._inner.clock
        self.complete, self.release, self.get = (
            self._inner.complete,
            self._inner.release,
            self._inner.get,
        )

    def claim(self, record: Any, *, now_ms: int, lease_cutoff_ms: int) -> Any:
        from botocore.exceptions import NoRegionError

        try:
            raise NoRegionError()
        except NoRegionError as exc:
            raise IdempotencyPersistenceConfigError(
                "no AWS region is configured: set AWS_REGION or pass a boto3 session"
            ) from exc


def test_a_misconfigured_store_answers_500_without_a_retry_hint(
    shape: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression: a store configuration error (no region) answered 503 with Retry-After: 1,
    as if the store had a passing outage. It is a 500 now, without Retry-After, logged at
    ERROR with the fix; the handler does not run."""
    handler = Runs(MisconfiguredStore())
    caplog.set_level(logging.ERROR, logger="idempotent_lambda")

    response = handler(ev.make_event(shape, key="k"))

    assert 500 == response["statusCode"]
    assert [] == ev.header(response, "Retry-After")
    assert "application/problem+json" == ev.header(response, "Content-Type")[0]
    assert 0 == handler.runs
    assert any("AWS_REGION" in record.getMessage() for record in caplog.records)


def test_a_request_without_a_key_names_the_header_in_its_warning(
    shape: str, idempotency_store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """With ``require_key=False`` a request without the header runs unrecorded; the SKIPPED
    warning names where the key was looked for."""
    decisions = Decisions()
    config = IdempotencyConfig(event_key_jmespath="body.order", decision_hook=decisions)

    @idempotent_http(persistence_store=idempotency_store, require_key=False, config=config)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": 200, "body": "ran"}

    caplog.set_level(logging.WARNING, logger="idempotent_lambda")
    assert 200 == handler(ev.make_event(shape), None)["statusCode"]
    expected = "the Idempotency-Key header, then event_key_jmespath 'body.order'"
    assert expected == decisions.last.key_source
    assert any(expected in record.getMessage() for record in caplog.records)
