"""`idempotent_http`: status paths, replays, what is stored, errors; over every event shape."""

from __future__ import annotations

import asyncio
import dataclasses
import decimal
import json
import logging
import threading
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyConfig,
    IdempotencyConfigError,
    IdempotencyUnstorableResultError,
    IdempotencyValidationError,
    InMemoryPersistenceLayer,
    idempotent_function,
)
from idempotent_lambda._lambda_context import current_lambda_context
from idempotent_lambda.adapters.api_gateway import idempotent_http
from idempotent_lambda.persistence.base import ClaimOutcome
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests.events import http_events as ev
from tests.unit._doubles import Decisions, PollWatchingStore, SpyStore

IETF_TYPE = "https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/"


@pytest.fixture(params=ev.SHAPES)
def shape(request: pytest.FixtureRequest) -> str:
    """Every event shape the adapter accepts."""
    return str(request.param)


def counting_handler(store: Any, status: int = 201, **options: Any) -> Any:
    """Return a decorated handler whose body counts its runs (``handler.runs``)."""
    runs: list[dict[str, Any]] = []

    @idempotent_http(persistence_store=store, **options)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event)
        return {
            "statusCode": status,
            "headers": {"Content-Type": "application/json"},
            "body": json.dumps({"run": len(runs)}),
        }

    handler.runs = runs  # type: ignore[attr-defined]
    return handler


def test_first_call_returns_the_handler_response_unchanged(
    shape: str, idempotency_store: Any, lambda_context: Any
) -> None:
    """The first request runs the handler; its response is not marked as replayed."""
    handler = counting_handler(idempotency_store)
    response = handler(ev.make_event(shape, key="k-1"), lambda_context)
    assert {
        "statusCode": 201,
        "headers": {"Content-Type": "application/json"},
        "body": '{"run": 1}',
    } == response
    assert 1 == len(handler.runs)


def test_retry_replays_the_stored_response_with_the_replayed_header(
    shape: str, idempotency_store: Any, lambda_context: Any
) -> None:
    """A retry gets the same status, headers and body plus ``Idempotent-Replayed: true``."""
    handler = counting_handler(idempotency_store)
    first = handler(ev.make_event(shape, key="k-1"), lambda_context)
    second = handler(ev.make_event(shape, key="k-1"), lambda_context)
    assert 1 == len(handler.runs)
    assert first["statusCode"] == second["statusCode"]
    assert first["body"] == second["body"]
    assert ["application/json"] == ev.header(second, "content-type")[:1]
    assert "true" in ev.header(second, "Idempotent-Replayed")
    assert not ev.header(first, "Idempotent-Replayed")


def test_replay_preserves_every_part_of_the_response(
    shape: str, idempotency_store: Any, lambda_context: Any
) -> None:
    """Status, single and multi-value headers, cookies (opted in), base64 body and ALB
    description survive."""
    original = {
        "statusCode": 202,
        "statusDescription": "202 Accepted",
        "headers": {"Location": "/orders/1", "X-Count": "0"},
        "multiValueHeaders": {"Set-Cookie": ["a=1", "b=2"], "Vary": ["Accept", "Origin"]},
        "cookies": ["a=1; Secure", "b=2; HttpOnly"],
        "body": "AAECAwQF/w==",
        "isBase64Encoded": True,
    }

    @idempotent_http(persistence_store=idempotency_store, store_cookies=True)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return dict(original)

    handler(ev.make_event(shape, key="k-1"), lambda_context)
    replayed = handler(ev.make_event(shape, key="k-1"), lambda_context)
    expected = dict(original)
    expected["headers"] = {**original["headers"], "Idempotent-Replayed": "true"}
    expected["multiValueHeaders"] = {
        **original["multiValueHeaders"],
        "Idempotent-Replayed": ["true"],
    }
    assert expected == replayed


def test_replay_header_goes_where_the_event_family_reads_it(
    shape: str, idempotency_store: Any, lambda_context: Any
) -> None:
    """A multi-value event gets the header in multiValueHeaders, others in headers."""

    @idempotent_http(persistence_store=idempotency_store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": 200, "body": "ok"}

    handler(ev.make_event(shape, key="k-1"), lambda_context)
    replayed = handler(ev.make_event(shape, key="k-1"), lambda_context)
    if shape in ev.MULTI_VALUE_SHAPES:
        assert {"Idempotent-Replayed": ["true"]} == replayed["multiValueHeaders"]
        assert "headers" not in replayed
    else:
        assert {"Idempotent-Replayed": "true"} == replayed["headers"]
        assert "multiValueHeaders" not in replayed


def test_a_stale_replayed_header_from_the_handler_is_replaced(
    shape: str, idempotency_store: Any, lambda_context: Any
) -> None:
    """A handler's own ``idempotent-replayed`` header (any case) does not duplicate ours."""

    @idempotent_http(persistence_store=idempotency_store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": 200, "headers": {"idempotent-replayed": "false"}, "body": ""}

    handler(ev.make_event(shape, key="k-1"), lambda_context)
    replayed = handler(ev.make_event(shape, key="k-1"), lambda_context)
    assert {"true"} == set(ev.header(replayed, "idempotent-replayed"))
    assert {"Idempotent-Replayed": "true"} == replayed["headers"]


@pytest.mark.parametrize("value", [{"order": 1}, "plain text", [1, 2], 0])
def test_inferred_v2_response_is_spelled_out_on_replay(
    shape: str, idempotency_store: Any, lambda_context: Any, value: Any
) -> None:
    """A response without statusCode replays as HTTP API would send it (v2); as stored otherwise."""

    @idempotent_http(persistence_store=idempotency_store)
    def handler(event: dict[str, Any], context: Any) -> Any:
        return value

    assert value == handler(ev.make_event(shape, key="k-1"), lambda_context)
    replayed = handler(ev.make_event(shape, key="k-1"), lambda_context)
    if shape in ev.V2_SHAPES:
        assert {
            "statusCode": 200,
            "headers": {"Content-Type": "application/json", "Idempotent-Replayed": "true"},
            "body": json.dumps(value),
            "isBase64Encoded": False,
        } == replayed
    else:
        assert value == replayed


def test_missing_key_is_a_400_problem_in_the_event_family(
    shape: str, idempotency_store: Any, lambda_context: Any
) -> None:
    """No key while required: 400 problem+json; the handler does not run."""
    handler = counting_handler(idempotency_store)
    response = handler(ev.make_event(shape), lambda_context)
    assert 400 == response["statusCode"]
    assert {
        "type": IETF_TYPE,
        "title": "Idempotency-Key is missing",
        "status": 400,
        "detail": "This operation is idempotent and requires an Idempotency-Key header.",
    } == ev.problem(response)
    assert [] == handler.runs
    assert (shape in ev.MULTI_VALUE_SHAPES) == ("multiValueHeaders" in response)
    assert (shape in ev.MULTI_VALUE_SHAPES) != ("headers" in response)
    assert (shape.startswith("alb")) == ("statusDescription" in response)
    if shape.startswith("alb"):
        assert "400 Bad Request" == response["statusDescription"]
    assert response["isBase64Encoded"] is False


def test_optional_key_runs_the_handler_without_idempotency(
    shape: str, idempotency_store: Any, lambda_context: Any, decisions: Decisions
) -> None:
    """``require_key=False``: no key, the handler runs every time and nothing is stored."""
    handler = counting_handler(
        idempotency_store, require_key=False, config=IdempotencyConfig(decision_hook=decisions)
    )
    handler(ev.make_event(shape), lambda_context)
    handler(ev.make_event(shape), lambda_context)
    assert 2 == len(handler.runs)
    assert 0 == len(idempotency_store)
    assert ["SKIPPED", "SKIPPED"] == decisions.outcomes


def test_optional_key_still_deduplicates_requests_that_send_one(
    shape: str, idempotency_store: Any, lambda_context: Any
) -> None:
    """``require_key=False``: a request with a key is still idempotent."""
    handler = counting_handler(idempotency_store, require_key=False)
    handler(ev.make_event(shape, key="k-1"), lambda_context)
    replayed = handler(ev.make_event(shape, key="k-1"), lambda_context)
    assert 1 == len(handler.runs)
    assert ["true"] == ev.header(replayed, "idempotent-replayed")


def test_same_key_different_request_is_a_422(
    shape: str, idempotency_store: Any, lambda_context: Any
) -> None:
    """Reusing a key with another body: 422 problem; the handler does not run again."""
    handler = counting_handler(idempotency_store)
    handler(ev.make_event(shape, key="k-1", body='{"amount": 1}'), lambda_context)
    response = handler(ev.make_event(shape, key="k-1", body='{"amount": 2}'), lambda_context)
    assert 422 == response["statusCode"]
    assert {
        "type": IETF_TYPE,
        "title": "Idempotency-Key is already used",
        "status": 422,
        "detail": "This Idempotency-Key was already used with a different request.",
    } == ev.problem(response)
    assert 1 == len(handler.runs)


def test_in_progress_is_a_409_with_retry_after_until_the_lease_ends(
    shape: str,
    idempotency_store: Any,
    idempotency_clock: ManualClock,
    lambda_context: FakeLambdaContext,
) -> None:
    """A duplicate during the first run: 409, Retry-After = lease seconds left, rounded up."""
    answers: list[dict[str, Any]] = []

    @idempotent_http(persistence_store=idempotency_store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        if not answers:
            answers.append({})  # re-entrant duplicate, while this first call holds the key
            idempotency_clock.advance(ms=12_500)
            answers.append(handler(ev.make_event(shape, key="k-1"), FakeLambdaContext()))
        return {"statusCode": 201, "body": "done"}

    lambda_context.set_remaining_ms(30_000)
    assert 201 == handler(ev.make_event(shape, key="k-1"), lambda_context)["statusCode"]
    duplicate = answers[-1]
    assert 409 == duplicate["statusCode"]
    assert ["18"] == ev.header(duplicate, "Retry-After")  # 30 s lease - 12.5 s, rounded up
    assert {
        "type": IETF_TYPE,
        "title": "A request is outstanding for this Idempotency-Key",
        "status": 409,
        "detail": "The first request with this key is still being processed; retry later.",
    } == ev.problem(duplicate)


@pytest.mark.parametrize(
    ("elapsed_ms", "retry_after"),
    [(0, "30"), (1, "30"), (999, "30"), (1000, "29"), (29_001, "1"), (29_999, "1"), (30_500, "1")],
)
def test_retry_after_is_whole_seconds_until_the_lease_ends_and_at_least_one(
    shape: str,
    idempotency_store: Any,
    idempotency_clock: ManualClock,
    elapsed_ms: int,
    retry_after: str,
) -> None:
    """Retry-After = ceil((lease end - now) / 1 s), never below 1 (also within clock tolerance)."""
    context = FakeLambdaContext(30_000, clock=idempotency_clock)
    seen: list[dict[str, Any]] = []

    @idempotent_http(persistence_store=idempotency_store)
    def handler(event: dict[str, Any], ctx: Any) -> dict[str, Any]:
        if not seen:
            seen.append({})
            idempotency_clock.advance(ms=elapsed_ms)
            seen.append(handler(event, FakeLambdaContext()))
        return {"statusCode": 200, "body": ""}

    handler(ev.make_event(shape, key="k-1"), context)
    assert 409 == seen[-1]["statusCode"]
    assert [retry_after] == ev.header(seen[-1], "Retry-After")


def test_retry_after_uses_the_configured_lease_without_a_context(
    shape: str, idempotency_store: Any, idempotency_clock: ManualClock
) -> None:
    """Without a Lambda context the lease is ``in_progress_expiry_seconds``."""
    seen: list[dict[str, Any]] = []
    config = IdempotencyConfig(in_progress_expiry_seconds=120)

    @idempotent_http(persistence_store=idempotency_store, config=config)
    def handler(event: dict[str, Any], ctx: Any) -> dict[str, Any]:
        if not seen:
            seen.append({})
            seen.append(handler(event, None))
        return {"statusCode": 200, "body": ""}

    handler(ev.make_event(shape, key="k-1"), None)
    assert ["120"] == ev.header(seen[-1], "Retry-After")


def test_wait_mode_returns_the_first_response_instead_of_409(
    shape: str, lambda_context: Any, idempotency_clock: ManualClock
) -> None:
    """With ``wait_for_in_progress_seconds`` a duplicate waits and gets the replay, not 409."""
    store = PollWatchingStore(InMemoryPersistenceLayer(clock=idempotency_clock))
    inside, release = threading.Event(), threading.Event()
    runs: list[int] = []

    @idempotent_http(
        persistence_store=store, config=IdempotencyConfig(wait_for_in_progress_seconds=60)
    )
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(1)
        inside.set()
        assert release.wait(60)
        return {"statusCode": 201, "body": "first"}

    results: dict[str, Any] = {}
    first = threading.Thread(
        target=lambda: results.setdefault("first", handler(ev.make_event(shape, key="w"), None))
    )
    first.start()
    assert inside.wait(60)
    second = threading.Thread(
        target=lambda: results.setdefault("second", handler(ev.make_event(shape, key="w"), None))
    )
    second.start()
    assert store.polled.wait(60)  # the duplicate found the key in progress and is polling
    release.set()
    first.join(60)
    second.join(60)
    assert 1 == len(runs)
    assert 201 == results["second"]["statusCode"]
    assert "first" == results["second"]["body"]
    assert ["true"] == ev.header(results["second"], "idempotent-replayed")


def test_5xx_responses_are_not_stored(
    shape: str, idempotency_store: Any, lambda_context: Any, decisions: Decisions
) -> None:
    """A 5xx releases the record: the retry runs the handler again."""
    statuses = [503, 201]

    @idempotent_http(
        persistence_store=idempotency_store, config=IdempotencyConfig(decision_hook=decisions)
    )
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": statuses.pop(0), "body": ""}

    assert 503 == handler(ev.make_event(shape, key="k-1"), lambda_context)["statusCode"]
    assert 0 == len(idempotency_store)
    assert 201 == handler(ev.make_event(shape, key="k-1"), lambda_context)["statusCode"]
    assert ["RELEASED", "CLAIMED"] == decisions.outcomes


@pytest.mark.parametrize("status_code", [500, "502", 599])
def test_every_5xx_spelling_is_released(
    shape: str, idempotency_store: Any, lambda_context: Any, status_code: Any
) -> None:
    """Integer and numeric-string 5xx status codes are both recognised."""
    handler = counting_handler(idempotency_store, status=status_code)
    handler(ev.make_event(shape, key="k-1"), lambda_context)
    handler(ev.make_event(shape, key="k-1"), lambda_context)
    assert 2 == len(handler.runs)


def test_4xx_responses_are_stored_by_default(
    shape: str, idempotency_store: Any, lambda_context: Any
) -> None:
    """A 404 is an answer: the retry gets it replayed."""
    handler = counting_handler(idempotency_store, status=404)
    handler(ev.make_event(shape, key="k-1"), lambda_context)
    replayed = handler(ev.make_event(shape, key="k-1"), lambda_context)
    assert 1 == len(handler.runs)
    assert 404 == replayed["statusCode"]


@pytest.mark.parametrize(
    ("policy", "status", "stored"),
    [
        (False, 404, False),
        (True, 404, True),
        (True, 409, True),
        (True, 401, False),
        (True, 403, False),
        (True, 407, False),
        (True, 408, False),
        (True, 429, False),
        (lambda status: True, 429, True),
        (lambda status: status != 429, 429, False),
        (lambda status: status != 429, 400, True),
        (False, 201, True),
        (False, 302, True),
    ],
)
def test_which_4xx_are_stored_is_configurable(
    shape: str, idempotency_store: Any, lambda_context: Any, policy: Any, status: int, stored: bool
) -> None:
    """``store_4xx`` takes a bool or a predicate on the status; 2xx/3xx are always stored; True
    leaves out the statuses a retry may change (401, 403, 407, 408, 429)."""
    handler = counting_handler(idempotency_store, status=status, store_4xx=policy)
    handler(ev.make_event(shape, key="k-1"), lambda_context)
    handler(ev.make_event(shape, key="k-1"), lambda_context)
    assert (1 if stored else 2) == len(handler.runs)


def test_handler_exception_propagates_and_the_retry_runs_again(
    shape: str, idempotency_store: Any, lambda_context: Any
) -> None:
    """The handler's own exception is re-raised unchanged; the record is released."""
    calls: list[int] = []
    failure = RuntimeError("boom")

    @idempotent_http(persistence_store=idempotency_store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 1:
            raise failure
        return {"statusCode": 200, "body": ""}

    with pytest.raises(RuntimeError) as raised:
        handler(ev.make_event(shape, key="k-1"), lambda_context)
    assert failure is raised.value
    assert 0 == len(idempotency_store)
    assert 200 == handler(ev.make_event(shape, key="k-1"), lambda_context)["statusCode"]


def test_handler_raising_an_idempotency_error_is_not_turned_into_a_problem(
    shape: str, idempotency_store: Any, lambda_context: Any
) -> None:
    """Only the adapter's own refusals become 4xx; the handler's errors propagate as they are."""

    @idempotent_http(persistence_store=idempotency_store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        raise IdempotencyValidationError("from a nested call")

    with pytest.raises(IdempotencyValidationError, match="nested"):
        handler(ev.make_event(shape, key="k-1"), lambda_context)


def test_store_failure_before_the_handler_is_a_503_with_retry_after(
    shape: str, idempotency_clock: ManualClock, lambda_context: Any
) -> None:
    """The claim failing: 503 problem, ``Retry-After: 1``, the handler did not run."""
    store = SpyStore(InMemoryPersistenceLayer(clock=idempotency_clock), fail={"claim"})
    handler = counting_handler(store)
    response = handler(ev.make_event(shape, key="k-1"), lambda_context)
    assert 503 == response["statusCode"]
    assert ["1"] == ev.header(response, "Retry-After")
    assert {
        "type": "about:blank",
        "title": "Service Unavailable",
        "status": 503,
        "detail": "The idempotency store is unavailable; the request was not processed.",
    } == ev.problem(response)
    assert [] == handler.runs


def test_store_failure_after_the_handler_still_returns_its_response(
    shape: str, idempotency_clock: ManualClock, lambda_context: Any
) -> None:
    """Completing failing: the side effect happened, so its response is returned."""
    store = SpyStore(InMemoryPersistenceLayer(clock=idempotency_clock), fail={"complete"})
    handler = counting_handler(store)
    assert 201 == handler(ev.make_event(shape, key="k-1"), lambda_context)["statusCode"]


def test_async_handlers_get_the_same_semantics(shape: str, idempotency_store: Any) -> None:
    """``async def`` handlers: first run, replay, 400 and 422 alike."""
    runs: list[int] = []

    @idempotent_http(persistence_store=idempotency_store)
    async def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(1)
        await asyncio.sleep(0)
        return {"statusCode": 201, "body": "made"}

    async def scenario() -> list[dict[str, Any]]:
        return [
            await handler(ev.make_event(shape, key="a"), None),
            await handler(ev.make_event(shape, key="a"), None),
            await handler(ev.make_event(shape), None),
            await handler(ev.make_event(shape, key="a", body="other"), None),
        ]

    first, replay, missing, reused = asyncio.run(scenario())
    assert 1 == len(runs)
    assert (201, 201, 400, 422) == tuple(r["statusCode"] for r in (first, replay, missing, reused))
    assert ["true"] == ev.header(replay, "idempotent-replayed")


def test_async_handler_exception_propagates(shape: str, idempotency_store: Any) -> None:
    """An ``async def`` handler's exception is re-raised and its record released."""

    @idempotent_http(persistence_store=idempotency_store)
    async def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        raise KeyError("inside")

    with pytest.raises(KeyError):
        asyncio.run(handler(ev.make_event(shape, key="a"), None))
    assert 0 == len(idempotency_store)


def test_async_store_failure_is_a_503(shape: str, idempotency_clock: ManualClock) -> None:
    """``async def`` handlers get the same 503 when the claim fails."""
    store = SpyStore(InMemoryPersistenceLayer(clock=idempotency_clock), fail={"claim"})

    @idempotent_http(persistence_store=store)
    async def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": 200}

    assert 503 == asyncio.run(handler(ev.make_event(shape, key="a"), None))["statusCode"]


def test_async_optional_key_passes_through(shape: str, idempotency_store: Any) -> None:
    """``async def`` handlers with ``require_key=False`` run without a key."""

    @idempotent_http(persistence_store=idempotency_store, require_key=False)
    async def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": 204}

    assert 204 == asyncio.run(handler(ev.make_event(shape), None))["statusCode"]


def test_disabled_by_environment_runs_the_handler_as_is(
    shape: str, idempotency_store: Any, lambda_context: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``IDEMPOTENCY_DISABLED`` bypasses the adapter entirely (even the key check)."""
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "true")
    handler = counting_handler(idempotency_store)
    handler(ev.make_event(shape, key="k-1"), lambda_context)
    handler(ev.make_event(shape), lambda_context)
    assert 2 == len(handler.runs)
    assert 0 == len(idempotency_store)


def test_the_lambda_context_is_bound_while_the_handler_runs(
    shape: str, idempotency_store: Any, lambda_context: Any
) -> None:
    """A nested `idempotent_function` sees the handler's context; it is unbound afterwards."""
    seen: list[Any] = []

    @idempotent_function(data_keyword_argument="order", persistence_store=idempotency_store)
    def nested(order: str) -> str:
        seen.append(current_lambda_context.get())
        return order

    @idempotent_http(persistence_store=idempotency_store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        seen.append(current_lambda_context.get())
        return {"statusCode": 200, "body": nested("o-1")}

    handler(ev.make_event(shape, key="k-1"), lambda_context)
    assert [lambda_context, lambda_context] == seen
    assert current_lambda_context.get() is None


def test_keyword_arguments_are_accepted(shape: str, idempotency_store: Any) -> None:
    """``handler(event=..., context=...)`` works like positional arguments."""
    handler = counting_handler(idempotency_store)
    handler(event=ev.make_event(shape, key="k"), context=None)
    replay = handler(event=ev.make_event(shape, key="k"), context=None)
    assert ["true"] == ev.header(replay, "idempotent-replayed")


def test_response_hook_runs_on_replays(
    shape: str, idempotency_store: Any, lambda_context: Any
) -> None:
    """``config.response_hook`` sees the stored response before the replay header is added."""

    def hook(response: dict[str, Any], record: Any) -> dict[str, Any]:
        return {**response, "body": response["body"] + " (again)"}

    handler = counting_handler(idempotency_store, config=IdempotencyConfig(response_hook=hook))
    handler(ev.make_event(shape, key="k-1"), lambda_context)
    replay = handler(ev.make_event(shape, key="k-1"), lambda_context)
    assert '{"run": 1} (again)' == replay["body"]
    assert ["true"] == ev.header(replay, "idempotent-replayed")


def test_local_cache_replays_without_a_store_call(shape: str, idempotency_clock: Any) -> None:
    """With ``use_local_cache`` the second request is answered from memory."""
    store = SpyStore(InMemoryPersistenceLayer(clock=idempotency_clock))
    handler = counting_handler(store, config=IdempotencyConfig(use_local_cache=True))
    handler(ev.make_event(shape, key="k-1"), None)
    calls = store.total_calls
    replay = handler(ev.make_event(shape, key="k-1"), None)
    assert calls == store.total_calls
    assert ["true"] == ev.header(replay, "idempotent-replayed")


def test_round_trips_are_at_the_floor(shape: str, idempotency_clock: Any) -> None:
    """First request: claim + complete; replay: one claim."""
    store = SpyStore(InMemoryPersistenceLayer(clock=idempotency_clock))
    handler = counting_handler(store)
    handler(ev.make_event(shape, key="k-1"), None)
    assert 2 == store.total_calls
    handler(ev.make_event(shape, key="k-1"), None)
    assert 3 == store.total_calls


def test_logs_never_carry_the_key_or_the_body(
    shape: str, idempotency_store: Any, lambda_context: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Log lines (text and structured extras) hold neither the header value nor the payload."""
    caplog.set_level(logging.DEBUG, logger="idempotent_lambda")
    secret_key, secret_body = "secret-key-0x5eed", '{"card": "card-number-QZXW"}'
    handler = counting_handler(idempotency_store)
    for event in (
        ev.make_event(shape, key=secret_key, body=secret_body),
        ev.make_event(shape, key=secret_key, body=secret_body),
        ev.make_event(shape, key=secret_key, body="other"),
        ev.make_event(shape, key=secret_key + "\x01", body=secret_body),
        ev.make_event(shape, body=secret_body),
    ):
        handler(event, lambda_context)
    assert caplog.records
    for record in caplog.records:
        text = record.getMessage() + repr(getattr(record, "idempotency", ""))
        assert secret_key not in text
        assert "card-number-QZXW" not in text


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"persistence_store": object()}, "persistence_store"),
        ({"config": {"event_key_jmespath": "x"}}, "config"),
        ({"header_name": ""}, "header_name"),
        ({"header_name": "Idempotency Key"}, "header_name"),
        ({"header_name": 7}, "header_name"),
        ({"key_prefix": ""}, "key_prefix"),
        ({"require_key": "yes"}, "require_key"),
        ({"store_4xx": "all"}, "store_4xx"),
    ],
)
def test_bad_arguments_fail_at_decoration_time(
    idempotency_store: Any, options: dict[str, Any], message: str
) -> None:
    """Unusable arguments raise `IdempotencyConfigError` before any request."""
    arguments = {"persistence_store": idempotency_store, **options}
    with pytest.raises(IdempotencyConfigError, match=message):
        idempotent_http(**arguments)


def test_unstorable_response_raises_and_so_do_its_retries(
    shape: str, idempotency_store: Any, lambda_context: Any
) -> None:
    """A response with no stored form is an error now and on every retry (never a re-run)."""
    runs: list[int] = []

    @idempotent_http(persistence_store=idempotency_store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(1)
        return {"statusCode": 200, "body": object()}

    for _ in range(2):
        with pytest.raises(IdempotencyUnstorableResultError):
            handler(ev.make_event(shape, key="k-1"), lambda_context)
    assert 1 == len(runs)


def test_a_response_without_a_json_form_replays_as_stored(
    shape: str, idempotency_store: Any, lambda_context: Any
) -> None:
    """An inferred-format response that JSON cannot spell (Decimal) is replayed unchanged.

    Natively; the default format replays the Decimal as its text, as Powertools does.
    """

    @idempotent_http(
        persistence_store=idempotency_store, config=IdempotencyConfig(record_format="native")
    )
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"price": decimal.Decimal("1.10")}

    handler(ev.make_event(shape, key="k-1"), lambda_context)
    assert {"price": decimal.Decimal("1.10")} == handler(
        ev.make_event(shape, key="k-1"), lambda_context
    )


@pytest.mark.parametrize("status_code", [None, "abc", 200.0, True])
def test_a_status_that_is_not_a_number_counts_as_200(
    shape: str, idempotency_store: Any, lambda_context: Any, status_code: Any
) -> None:
    """A response whose statusCode is unreadable is stored like a 200."""
    handler = counting_handler(idempotency_store, status=status_code)
    handler(ev.make_event(shape, key="k-1"), lambda_context)
    handler(ev.make_event(shape, key="k-1"), lambda_context)
    assert 1 == len(handler.runs)


class NoLeaseStore:
    """Report blocking records without a lease end (an item written without one)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.clock = inner.clock

    def claim(self, record: Any, *, now_ms: int, lease_cutoff_ms: int) -> ClaimOutcome:
        outcome = self.inner.claim(record, now_ms=now_ms, lease_cutoff_ms=lease_cutoff_ms)
        if outcome.claimed or outcome.previous is None:
            return outcome
        previous = dataclasses.replace(outcome.previous, in_progress_expiry_timestamp=None)
        return ClaimOutcome(claimed=False, previous=previous)

    def complete(self, record: Any) -> bool:
        return bool(self.inner.complete(record))

    def release(self, key: str, owner: str) -> bool:
        return bool(self.inner.release(key, owner))

    def get(self, key: str) -> Any:
        return self.inner.get(key)


def test_retry_after_is_one_second_when_the_lease_end_is_unknown(
    shape: str, idempotency_store: Any
) -> None:
    """A holder without a recorded lease end: ``Retry-After: 1``."""
    store = NoLeaseStore(idempotency_store)
    seen: list[dict[str, Any]] = []

    @idempotent_http(persistence_store=store)
    def handler(event: dict[str, Any], ctx: Any) -> dict[str, Any]:
        if not seen:
            seen.append({})
            seen.append(handler(event, None))
        return {"statusCode": 200, "body": ""}

    handler(ev.make_event(shape, key="k-1"), None)
    assert 409 == seen[-1]["statusCode"]
    assert ["1"] == ev.header(seen[-1], "Retry-After")
