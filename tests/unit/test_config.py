"""Configuration: validated when built, JMESPath functions, missing keys, the disable switch."""

from __future__ import annotations

import base64
import gzip
import json
import logging
import socket
from typing import Any

import jmespath.functions
import pytest

from idempotent_lambda import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    IdempotencyConfigError,
    IdempotencyKeyError,
    InMemoryPersistenceLayer,
    idempotent,
    idempotent_function,
)
from idempotent_lambda.persistence import _aws
from idempotent_lambda.testing import FakeLambdaContext
from tests.unit._doubles import Decisions, Runs


def make_handler(store: Any, config: IdempotencyConfig, runs: Runs) -> Any:
    """Return an idempotent handler that counts its runs."""

    @idempotent(persistence_store=store, config=config)
    def handler(event: Any, context: Any) -> int:
        return runs(event)

    return handler


@pytest.mark.parametrize(
    "options",
    [
        {"event_key_jmespath": "body.["},
        {"event_key_jmespath": "unknown_function(body)"},
        {"payload_validation_jmespath": "[?"},
        {"event_key_jmespath": 42},
        {"expires_after_seconds": 0},
        {"expires_after_seconds": -1},
        {"expires_after_seconds": 1.5},
        {"expires_after_seconds": True},
        {"local_cache_max_items": 0},
        {"in_progress_expiry_seconds": 0},
        {"wait_for_in_progress_seconds": -1},
        {"wait_for_in_progress_seconds": "5"},
        {"wait_for_in_progress_seconds": float("nan")},
        {"hash_function": "not-a-hash"},
        {"hash_function": "shake_128"},
        {"hash_function": 5},
        {"record_format": "dynamodb"},
        {"record_format": None},
        {"response_hook": "not callable"},
        {"decision_hook": 1},
        {"jmespath_options": {"unknown_option": 1}},
        {"jmespath_options": {"custom_functions": object()}},
        {"jmespath_options": ["custom_functions"]},
    ],
    ids=lambda options: "-".join(f"{k}={v!r}" for k, v in options.items()),
)
def test_invalid_options_fail_when_the_config_is_built(options: dict[str, Any]) -> None:
    """Bad settings raise `IdempotencyConfigError` at construction, not on the first event."""
    with pytest.raises(IdempotencyConfigError):
        IdempotencyConfig(**options)


def test_unknown_jmespath_function_fails_at_construction() -> None:
    """Calling a function that does not exist is caught when the expression is compiled."""
    with pytest.raises(IdempotencyConfigError):
        IdempotencyConfig(event_key_jmespath="powertools_jsn(body)")


def test_config_is_frozen() -> None:
    """A config cannot be changed after construction."""
    config = IdempotencyConfig()

    with pytest.raises(AttributeError):
        config.expires_after_seconds = 1  # type: ignore[misc]


def test_defaults_match_the_contract() -> None:
    """The documented defaults."""
    config = IdempotencyConfig()

    actual = (
        config.event_key_jmespath,
        config.payload_validation_jmespath,
        config.raise_on_no_idempotency_key,
        config.expires_after_seconds,
        config.in_progress_expiry_seconds,
        config.lease_seconds_without_context,
        config.wait_for_in_progress_seconds,
        config.use_local_cache,
        config.local_cache_max_items,
        config.hash_name,
        config.jmespath_options,
        config.response_hook,
        config.record_format,
    )
    assert (
        "",
        "",
        False,
        3600,
        None,
        900,
        0,
        False,
        256,
        "md5",
        None,
        None,
        "powertools",
    ) == actual


@pytest.mark.parametrize(
    ("store", "options"),
    [
        (object(), {}),
        (InMemoryPersistenceLayer(), {"config": {"event_key_jmespath": "id"}}),
        (InMemoryPersistenceLayer(), {"key_prefix": ""}),
        (InMemoryPersistenceLayer(), {"key_prefix": 5}),
    ],
    ids=["not-a-store", "config-dict", "empty-prefix", "int-prefix"],
)
def test_bad_decorator_arguments_fail_at_decoration(store: Any, options: dict[str, Any]) -> None:
    """A wrong store, config or prefix raises `IdempotencyConfigError` when decorating."""
    with pytest.raises(IdempotencyConfigError):
        idempotent(persistence_store=store, **options)


# --- missing key material -------------------------------------------------------------------

MISSING = [None, "", [], {}, [None, None], {"a": None}]


@pytest.mark.parametrize("material", MISSING, ids=repr)
def test_missing_key_runs_without_idempotency_and_warns(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    caplog: pytest.LogCaptureFixture,
    decisions: Decisions,
    material: Any,
) -> None:
    """No key material (optional keys): the body runs every time with a warning; nothing stored."""
    runs = Runs()
    config = IdempotencyConfig(event_key_jmespath="order_id", decision_hook=decisions)
    handler = make_handler(idempotency_store, config, runs)
    caplog.set_level(logging.WARNING, logger="idempotent_lambda")

    handler({"order_id": material}, lambda_context)
    handler({"order_id": material}, lambda_context)

    assert 2 == runs.count
    assert 0 == len(idempotency_store)
    assert ["SKIPPED", "SKIPPED"] == decisions.outcomes
    assert 2 == sum(r.levelno == logging.WARNING for r in caplog.records)


@pytest.mark.parametrize("material", MISSING, ids=repr)
def test_missing_key_raises_when_keys_are_required(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext, material: Any
) -> None:
    """With ``raise_on_no_idempotency_key`` a missing key raises and the body does not run."""
    runs = Runs()
    config = IdempotencyConfig(event_key_jmespath="order_id", raise_on_no_idempotency_key=True)
    handler = make_handler(idempotency_store, config, runs)

    with pytest.raises(IdempotencyKeyError):
        handler({"order_id": material}, lambda_context)

    assert 0 == runs.count


def test_absent_field_is_a_missing_key(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A key expression that finds nothing raises when keys are required."""
    config = IdempotencyConfig(event_key_jmespath="order_id", raise_on_no_idempotency_key=True)
    handler = make_handler(idempotency_store, config, Runs())

    with pytest.raises(IdempotencyKeyError):
        handler({"other": 1}, lambda_context)


@pytest.mark.parametrize("material", [0, False, [None, 0], {"a": None, "b": False}], ids=repr)
def test_zero_and_false_are_valid_keys(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext, material: Any
) -> None:
    """``0`` and ``False`` (also inside containers) are keys: the second call replays."""
    runs = Runs()
    config = IdempotencyConfig(event_key_jmespath="order_id", raise_on_no_idempotency_key=True)
    handler = make_handler(idempotency_store, config, runs)

    handler({"order_id": material}, lambda_context)
    handler({"order_id": material}, lambda_context)

    assert 1 == runs.count


def test_zero_and_false_are_different_keys(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """``0`` and ``False`` hash apart (booleans are never numbers in canonical JSON)."""
    runs = Runs()
    handler = make_handler(idempotency_store, IdempotencyConfig(event_key_jmespath="k"), runs)

    handler({"k": 0}, lambda_context)
    handler({"k": False}, lambda_context)

    assert 2 == runs.count


@pytest.mark.parametrize(
    ("event", "expression"),
    [
        ({"k": float("nan")}, "k"),
        ({"k": object()}, "k"),
        ({"body": "{not json"}, "powertools_json(body)"),
    ],
    ids=["nan", "object", "bad-json"],
)
def test_unhashable_or_unevaluable_key_material_raises_key_error(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    event: dict[str, Any],
    expression: str,
) -> None:
    """Key material with no canonical form, or an expression that fails, is a key error.

    NaN has no canonical form in the native format; the default hashes it as Powertools does.
    """
    runs = Runs()
    handler = make_handler(
        idempotency_store,
        IdempotencyConfig(record_format="native", event_key_jmespath=expression),
        runs,
    )

    with pytest.raises(IdempotencyKeyError):
        handler(event, lambda_context)

    assert 0 == runs.count


# --- JMESPath functions ---------------------------------------------------------------------


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _b64_gzip(text: str) -> str:
    return base64.b64encode(gzip.compress(text.encode())).decode()


@pytest.mark.parametrize(
    ("expression", "first", "same", "different"),
    [
        (
            "powertools_json(body).order_id",
            {"body": json.dumps({"order_id": 1, "at": "t1"})},
            {"body": '{"at": "t2",   "order_id": 1}'},
            {"body": json.dumps({"order_id": 2})},
        ),
        (
            "powertools_json(powertools_base64(data)).id",
            {"data": _b64('{"id": "a"}')},
            {"data": _b64('{"id":"a","x":1}')},
            {"data": _b64('{"id": "b"}')},
        ),
        (
            "powertools_base64_gzip(data)",
            {"data": _b64_gzip("payload-1")},
            {"data": _b64_gzip("payload-1"), "other": 1},
            {"data": _b64_gzip("payload-2")},
        ),
    ],
    ids=["powertools_json", "powertools_base64", "powertools_base64_gzip"],
)
def test_builtin_jmespath_functions_select_the_key(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    expression: str,
    first: dict[str, Any],
    same: dict[str, Any],
    different: dict[str, Any],
) -> None:
    """Powertools' JMESPath built-ins work in key expressions, with the same meaning."""
    runs = Runs()
    handler = make_handler(
        idempotency_store, IdempotencyConfig(event_key_jmespath=expression), runs
    )

    handler(first, lambda_context)
    handler(same, lambda_context)
    handler(different, lambda_context)

    assert 2 == runs.count


class CustomFunctions(jmespath.functions.Functions):
    """A user's JMESPath functions."""

    @jmespath.functions.signature({"types": ["string"]})
    def _func_lower(self, value: str) -> str:
        return value.lower()


def test_custom_jmespath_functions_are_added_to_the_builtins(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """``jmespath_options`` adds the user's functions; the built-ins stay available."""
    runs = Runs()
    config = IdempotencyConfig(
        event_key_jmespath="lower(powertools_json(body).email)",
        jmespath_options={"custom_functions": CustomFunctions()},
    )
    handler = make_handler(idempotency_store, config, runs)

    handler({"body": '{"email": "Ann@Example.com"}'}, lambda_context)
    handler({"body": '{"email": "ann@example.COM"}'}, lambda_context)

    assert 1 == runs.count


def test_custom_functions_may_redefine_a_builtin(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """A user's function with a built-in's name wins."""

    class Override(jmespath.functions.Functions):
        @jmespath.functions.signature({"types": ["string"]})
        def _func_powertools_json(self, value: str) -> str:
            return "constant"

    runs = Runs()
    config = IdempotencyConfig(
        event_key_jmespath="powertools_json(body)",
        jmespath_options={"custom_functions": Override()},
    )
    handler = make_handler(idempotency_store, config, runs)

    handler({"body": '{"a": 1}'}, lambda_context)
    handler({"body": '{"a": 2}'}, lambda_context)

    assert 1 == runs.count


def test_validation_expression_may_use_the_builtins(
    idempotency_store: InMemoryPersistenceLayer, lambda_context: FakeLambdaContext
) -> None:
    """The key and the validation expression can both parse the same JSON body."""
    from idempotent_lambda import IdempotencyValidationError

    config = IdempotencyConfig(
        event_key_jmespath="powertools_json(body).id",
        payload_validation_jmespath="powertools_json(body).amount",
    )
    handler = make_handler(idempotency_store, config, Runs())

    handler({"body": '{"id": 1, "amount": 5}'}, lambda_context)
    with pytest.raises(IdempotencyValidationError):
        handler({"body": '{"id": 1, "amount": 6}'}, lambda_context)


# --- hash functions -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "hex_length"),
    [("md5", 32), ("sha1", 40), ("sha512", 128), ("sha3_256", 64), ("blake2b", 128)],
)
def test_any_hashlib_algorithm_can_hash_keys(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
    name: str,
    hex_length: int,
) -> None:
    """``hash_function`` accepts hashlib names; the key's digest has that algorithm's length."""
    config = IdempotencyConfig(hash_function=name, decision_hook=decisions)
    handler = make_handler(idempotency_store, config, Runs())

    handler({"id": 1}, lambda_context)

    assert hex_length == len((decisions.last.key or "").rsplit("#", 1)[1])


# --- the disable switch ---------------------------------------------------------------------

TRUTHY = ["1", "true", "TRUE", "True", "yes", "YES", "on", "On", "y", "Y", "t", "T", " true "]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("variable", ["IDEMPOTENCY_DISABLED", "POWERTOOLS_IDEMPOTENCY_DISABLED"])
@pytest.mark.parametrize("value", TRUTHY)
def test_disable_switch_bypasses_idempotency_without_building_a_client(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    lambda_context: FakeLambdaContext,
    variable: str,
    value: str,
) -> None:
    """With the switch on, the body runs every time, a warning is logged, DynamoDB is untouched."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", f"http://127.0.0.1:{_closed_port()}")

    def no_client(*args: object, **kwargs: object) -> None:
        raise AssertionError("a boto3 client was built")

    monkeypatch.setattr(_aws, "build_client", no_client)
    store = DynamoDBPersistenceLayer("IdempotencyTable")
    runs = Runs()
    handler = make_handler(store, IdempotencyConfig(), runs)
    caplog.set_level(logging.WARNING, logger="idempotent_lambda")
    monkeypatch.setenv(variable, value)

    handler({"id": 1}, lambda_context)
    handler({"id": 1}, lambda_context)

    assert 2 == runs.count
    assert 2 == sum("DISABLED" in r.getMessage() for r in caplog.records)
    assert all(r.levelno == logging.WARNING for r in caplog.records)


@pytest.mark.parametrize("value", ["0", "false", "no", "off", "", "disabled"])
def test_other_switch_values_keep_idempotency_on(
    monkeypatch: pytest.MonkeyPatch,
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    value: str,
) -> None:
    """Values outside the truthy set leave idempotency on."""
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", value)
    runs = Runs()
    handler = make_handler(idempotency_store, IdempotencyConfig(), runs)

    handler({"id": 1}, lambda_context)
    handler({"id": 1}, lambda_context)

    assert 1 == runs.count


def test_disable_switch_is_read_at_call_time(
    monkeypatch: pytest.MonkeyPatch,
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
) -> None:
    """Flipping the variable after decoration takes effect on the next call."""
    runs = Runs()
    handler = make_handler(idempotency_store, IdempotencyConfig(), runs)

    handler({"id": 1}, lambda_context)
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "true")
    handler({"id": 1}, lambda_context)
    monkeypatch.delenv("IDEMPOTENCY_DISABLED")
    handler({"id": 1}, lambda_context)

    assert 2 == runs.count


def test_disable_switch_applies_to_idempotent_function(
    monkeypatch: pytest.MonkeyPatch, idempotency_store: InMemoryPersistenceLayer
) -> None:
    """``idempotent_function`` honours the switch too."""
    monkeypatch.setenv("POWERTOOLS_IDEMPOTENCY_DISABLED", "1")
    runs = Runs()

    @idempotent_function(data_keyword_argument="order", persistence_store=idempotency_store)
    def process(order: dict[str, Any]) -> int:
        return runs(order)

    process(order={"id": 1})
    process(order={"id": 1})

    assert 2 == runs.count
    assert 0 == len(idempotency_store)


# --- default prefix -------------------------------------------------------------------------


def test_default_prefix_uses_the_function_name_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    decisions: Decisions,
) -> None:
    """Natively, without ``key_prefix``: ``{function name or 'local'}.{module}.{qualname}``.

    The default format's prefix is Powertools' own (tests/unit/test_record_format.py).
    """
    config = IdempotencyConfig(record_format="native", decision_hook=decisions)
    handler = make_handler(idempotency_store, config, Runs())

    handler({"id": 1}, lambda_context)
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "orders-fn")
    handler({"id": 1}, lambda_context)

    local, named = (d.key or "" for d in decisions.items)
    assert f"local.{__name__}.make_handler.<locals>.handler" == local.split("#")[0]
    assert f"orders-fn.{__name__}.make_handler.<locals>.handler" == named.split("#")[0]
    assert local.split("#")[1] == named.split("#")[1]


def test_environment_is_read_on_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """The disable switch and the function name follow the environment as it changes."""
    from idempotent_lambda._engine import idempotency_disabled
    from idempotent_lambda._record_format import lambda_function_name

    assert (False, "local") == (idempotency_disabled(), lambda_function_name())
    monkeypatch.setenv("POWERTOOLS_IDEMPOTENCY_DISABLED", " Yes ")
    assert idempotency_disabled()
    monkeypatch.setenv("POWERTOOLS_IDEMPOTENCY_DISABLED", "0")
    assert not idempotency_disabled()
    names = [f"orders-{index}-é" for index in range(40)]
    seen = []
    for name in names:
        monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", name)
        seen.append(lambda_function_name())
    assert names == seen


@pytest.mark.parametrize(
    ("expression", "event", "named"),
    [
        ("order.id", {"order": {}}, "event_key_jmespath 'order.id'"),
        ("", {}, "the whole payload"),
    ],
    ids=["expression", "whole-payload"],
)
def test_a_missing_key_names_the_expression_that_found_nothing(
    idempotency_store: InMemoryPersistenceLayer,
    lambda_context: FakeLambdaContext,
    caplog: pytest.LogCaptureFixture,
    expression: str,
    event: dict[str, Any],
    named: str,
) -> None:
    """Regression: the warning said only SKIPPED and the error "no idempotency key found in the
    payload". Both now name what was searched: the expression, or the whole payload."""
    decisions = Decisions()
    optional = IdempotencyConfig(event_key_jmespath=expression, decision_hook=decisions)
    caplog.set_level(logging.WARNING, logger="idempotent_lambda")
    make_handler(idempotency_store, optional, Runs())(event, lambda_context)

    assert named == decisions.last.key_source
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert named in warning.getMessage()

    required = IdempotencyConfig(event_key_jmespath=expression, raise_on_no_idempotency_key=True)
    with pytest.raises(IdempotencyKeyError) as refused:
        make_handler(idempotency_store, required, Runs())(event, lambda_context)
    assert named in str(refused.value)
