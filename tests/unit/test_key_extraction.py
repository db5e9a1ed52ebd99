"""Key extraction on the config, and the JMESPath functions users may add to the built-ins."""

from __future__ import annotations

import base64
import gzip
import json
import threading
from typing import Any

import pytest
from aws_lambda_powertools.utilities.jmespath_utils import PowertoolsFunctions
from jmespath import functions

from idempotent_lambda import (
    IdempotencyConfig,
    IdempotencyConfigError,
    IdempotencyFunctions,
    IdempotencyKeyError,
)

BODY = '{"order_id": "o-1", "amount": 5}'


class Prefixed(IdempotencyFunctions):
    """A user's functions with constructor state, as the docs recommend writing them."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    @functions.signature({"types": ["string"]})
    def _func_tag(self, value: str) -> str:
        return self.prefix + value


class PowertoolsStyle(PowertoolsFunctions):
    """A user's functions written for Powertools."""

    @functions.signature({"types": ["string"]})
    def _func_lower(self, value: str) -> str:
        return value.lower()


class Plain(functions.Functions):
    """A user's functions on the bare jmespath base class."""

    @functions.signature({"types": ["string"]})
    def _func_upper(self, value: str) -> str:
        return value.upper()


def config(key: str = "", validation: str = "", custom: Any = None) -> IdempotencyConfig:
    """Return a config with these expressions and custom functions."""
    options = None if custom is None else {"custom_functions": custom}
    return IdempotencyConfig(
        event_key_jmespath=key, payload_validation_jmespath=validation, jmespath_options=options
    )


# --- key_material / validation_material -------------------------------------------------------


def test_without_expressions_the_key_is_the_payload_and_nothing_is_validated() -> None:
    """No key expression: the whole payload; no validation expression: None."""
    payload = {"a": [1, 2]}
    assert payload is config().key_material(payload)
    assert config().validation_material(payload) is None


def test_expressions_are_evaluated_on_the_payload() -> None:
    """Both expressions read the payload, through the built-ins too."""
    settings = config("powertools_json(body).order_id", "powertools_json(body).amount")
    assert ("o-1", 5) == (
        settings.key_material({"body": BODY}),
        settings.validation_material({"body": BODY}),
    )


@pytest.mark.parametrize(
    ("expression", "payload"),
    [
        ("powertools_json(body).id", {"body": "not json"}),
        ("powertools_base64(body)", {"body": "a"}),
        ("powertools_base64_gzip(body)", {"body": base64.b64encode(b"not gzip").decode()}),
        ("powertools_base64(body)", {"body": 5}),
        ("length(body)", {"body": 5}),
    ],
)
def test_an_expression_that_fails_raises_a_key_error(expression: str, payload: Any) -> None:
    """A failing expression is an `IdempotencyKeyError` naming the option, not the payload."""
    for settings, extract, name in (
        (config(key=expression), "key_material", "event_key_jmespath"),
        (config(validation=expression), "validation_material", "payload_validation_jmespath"),
    ):
        with pytest.raises(IdempotencyKeyError, match=f"^{name} could not be evaluated"):
            getattr(settings, extract)(payload)


@pytest.mark.parametrize(
    ("key", "validation"),
    [
        ("powertools_json(body).order_id", "powertools_json(body)"),
        ("powertools_json(body).order_id", "powertools_json(body).amount"),
        ("powertools_json(body)", "powertools_json(body)"),
        ("powertools_json(body).missing.deeper", "to_string(powertools_json(body).missing)"),
        ("body", "powertools_json(body).[order_id, amount]"),
        ("powertools_json(body).order_id", "length(body)"),
    ],
)
def test_extract_equals_evaluating_each_expression(key: str, validation: str) -> None:
    """`extract` gives what `key_material` and `validation_material` give one by one."""
    settings = config(key, validation)
    payload = {"body": BODY}
    expected = (settings.key_material(payload), settings.validation_material(payload))
    assert expected == settings.extract(payload)


def test_extract_parses_a_body_both_expressions_start_from_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``powertools_json(body)`` shared by the key and validation is evaluated once."""
    parses: list[str] = []
    real_loads = json.loads

    def counting_loads(text: Any, **kwargs: Any) -> Any:
        parses.append(text)
        return real_loads(text, **kwargs)

    monkeypatch.setattr(json, "loads", counting_loads)
    settings = config("powertools_json(body).order_id", "powertools_json(body).amount")
    assert ("o-1", 5) == settings.extract({"body": BODY})
    assert [BODY] == parses


def test_extract_blames_the_key_expression_for_a_shared_step_that_fails() -> None:
    """A failing shared step is reported as the key expression's failure, as evaluated alone."""
    settings = config("powertools_json(body).order_id", "powertools_json(body)")
    with pytest.raises(IdempotencyKeyError, match=r"^event_key_jmespath could not be evaluated"):
        settings.extract({"body": "not json"})


def test_builtins_hand_back_already_parsed_json() -> None:
    """``powertools_json``/``powertools_base64`` return an object or array as it is."""
    parsed = {"order_id": "o-1"}
    settings = config("powertools_json(powertools_base64(body)).order_id", "powertools_json(rows)")
    assert "o-1" == settings.key_material({"body": parsed})
    assert [1] == settings.validation_material({"rows": [1]})


def test_the_gzip_builtin_decodes() -> None:
    """``powertools_base64_gzip`` has Powertools' meaning."""
    data = base64.b64encode(gzip.compress(BODY.encode())).decode()
    assert "o-1" == config("powertools_json(powertools_base64_gzip(d)).order_id").key_material(
        {"d": data}
    )


# --- custom functions -------------------------------------------------------------------------


def test_a_subclass_of_ours_is_used_as_given() -> None:
    """Its constructor state is kept and the built-ins are there."""
    settings = config("tag(powertools_json(body).order_id)", custom=Prefixed("shop-"))
    assert "shop-o-1" == settings.key_material({"body": BODY})


def test_a_powertools_functions_subclass_works() -> None:
    """An instance written for Powertools brings the same built-ins and its own functions."""
    settings = config("lower(powertools_json(body).order_id)", custom=PowertoolsStyle())
    assert "o-1" == settings.key_material({"body": BODY.upper().replace("ORDER_ID", "order_id")})


def test_a_plain_functions_subclass_gets_the_builtins() -> None:
    """A bare ``Functions`` subclass is combined with the built-ins."""
    settings = config("upper(powertools_json(body).order_id)", custom=Plain())
    assert "O-1" == settings.key_material({"body": BODY})


def test_a_plain_subclass_that_cannot_be_rebuilt_is_rejected() -> None:
    """Constructor arguments or extra state would be lost in the rebuild: a config error."""

    class NeedsArguments(functions.Functions):
        def __init__(self, suffix: str) -> None:
            self.suffix = suffix

    with_state = Plain()
    with_state.extra = 1  # type: ignore[attr-defined]

    for custom in (NeedsArguments("x"), with_state):
        with pytest.raises(IdempotencyConfigError, match=r"subclass .*IdempotencyFunctions"):
            config("powertools_json(body)", custom=custom)


def test_unknown_functions_are_rejected_when_the_config_is_built() -> None:
    """A call to a function no one defines fails at configuration time."""
    with pytest.raises(IdempotencyConfigError, match="unknown function 'tag'"):
        config("tag(body)", custom=Plain())


def test_one_config_extracts_correctly_from_many_threads() -> None:
    """The shared functions instance and interpreter hold nothing from one call to the next."""
    settings = config(
        "upper(powertools_json(body).order_id)", "powertools_json(body).amount", custom=Plain()
    )
    start = threading.Barrier(8)
    wrong: list[tuple[Any, Any]] = []

    def extract(thread: int) -> None:
        start.wait()
        for n in range(300):
            payload = {"body": f'{{"order_id": "o-{thread}-{n}", "amount": {n}}}'}
            got = (settings.key_material(payload), settings.validation_material(payload))
            if got != (f"O-{thread}-{n}", n):
                wrong.append(got)

    threads = [threading.Thread(target=extract, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [] == wrong
