"""Powertools interop: decision metrics into a Powertools Metrics, decision lines into a Logger."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from idempotent_lambda import (
    IdempotencyConfig,
    IdempotencyConfigError,
    InMemoryPersistenceLayer,
    idempotent,
)
from idempotent_lambda.metrics import PowertoolsMetricsHook

powertools = pytest.importorskip("aws_lambda_powertools")

EVENT = {"order_id": 7}


def make_handler(store: Any, config: IdempotencyConfig) -> Any:
    """Return an idempotent handler keyed on ``order_id``."""

    @idempotent(persistence_store=store, config=config, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"ok": event["order_id"]}

    return handler


@pytest.fixture
def pt_metrics(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Return a Powertools Metrics object; its class-level state is cleared afterwards."""
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    metrics = powertools.Metrics(namespace="Orders", service="orders")
    metrics.clear_metrics()
    yield metrics
    metrics.clear_metrics()


def test_metrics_go_into_the_powertools_object(
    idempotency_store: InMemoryPersistenceLayer, pt_metrics: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Decision metrics are flushed by ``log_metrics`` in Powertools' own EMF document."""
    handler = make_handler(
        idempotency_store, IdempotencyConfig(decision_hook=PowertoolsMetricsHook(pt_metrics))
    )

    @pt_metrics.log_metrics  # type: ignore[untyped-decorator]
    def lambda_handler(event: dict[str, Any], context: Any) -> Any:
        handler(event, context)
        return handler(event, context)

    assert {"ok": 7} == lambda_handler(EVENT, None)
    (line,) = capsys.readouterr().out.splitlines()
    document = json.loads(line)
    (directive,) = document["_aws"]["CloudWatchMetrics"]
    assert "Orders" == directive["Namespace"]
    assert "orders" == document["service"]
    names = {m["Name"]: m["Unit"] for m in directive["Metrics"]}
    assert {"Claimed", "Replayed", "StoreLatency", "StoreCalls"} <= set(names)
    assert "Milliseconds" == names["StoreLatency"]
    assert ([1.0], [1.0]) == (document["Claimed"], document["Replayed"])
    assert [2.0, 1.0] == document["StoreCalls"]


def test_powertools_hook_needs_add_metric() -> None:
    """Anything without ``add_metric`` is refused when the hook is built."""
    with pytest.raises(IdempotencyConfigError):
        PowertoolsMetricsHook(object())


# --- Logger interop ----------------------------------------------------------------------------


def _unique(service: str) -> str:
    """Return a fresh service name: Powertools reuses the handler of a Logger with the same one."""
    return f"{service}-{uuid.uuid4().hex[:8]}"


def test_decision_lines_go_through_a_powertools_logger(
    idempotency_store: InMemoryPersistenceLayer, caplog: pytest.LogCaptureFixture
) -> None:
    """With a Powertools Logger, lines come out in its JSON with the fields under "idempotency"."""
    out = io.StringIO()
    logger = powertools.Logger(service=_unique("orders"), stream=out, level="INFO")
    logger.append_keys(tenant="acme")
    handler = make_handler(
        idempotency_store, IdempotencyConfig(event_key_jmespath="order_id", logger=logger)
    )
    with caplog.at_level(logging.DEBUG, logger="idempotent_lambda"):
        handler(EVENT, None)
        handler(EVENT, None)

    first, replay = (json.loads(line) for line in out.getvalue().splitlines())
    assert ("INFO", "acme") == (first["level"], first["tenant"])
    assert "CLAIMED" == first["idempotency"]["outcome"]
    assert first["idempotency"]["key"].startswith("orders#")
    assert 2 == first["idempotency"]["store_calls"]
    assert first["message"].startswith("idempotency outcome=CLAIMED")
    assert ("REPLAYED", "store") == (
        replay["idempotency"]["outcome"],
        replay["idempotency"]["source"],
    )
    assert "order_id" not in out.getvalue()  # never the payload
    assert not [r for r in caplog.records if r.name == "idempotent_lambda"]


def test_powertools_logger_gets_warnings_at_warning_level(
    idempotency_store: InMemoryPersistenceLayer,
) -> None:
    """A SKIPPED decision (no key material) is a WARNING line in the Powertools output."""
    out = io.StringIO()
    logger = powertools.Logger(service=_unique("orders"), stream=out, level="WARNING")
    handler = make_handler(
        idempotency_store, IdempotencyConfig(event_key_jmespath="missing", logger=logger)
    )
    handler(EVENT, None)
    (line,) = out.getvalue().splitlines()
    assert ("WARNING", "SKIPPED") == (
        json.loads(line)["level"],
        json.loads(line)["idempotency"]["outcome"],
    )


def test_decision_lines_go_through_a_stdlib_logger(
    idempotency_store: InMemoryPersistenceLayer, caplog: pytest.LogCaptureFixture
) -> None:
    """A plain ``logging.Logger`` works too: the fields are on the record as ``idempotency``."""
    handler = make_handler(
        idempotency_store,
        IdempotencyConfig(event_key_jmespath="order_id", logger=logging.getLogger("myapp")),
    )
    with caplog.at_level(logging.INFO):
        handler(EVENT, None)
    (record,) = [r for r in caplog.records if r.name in {"myapp", "idempotent_lambda"}]
    assert "myapp" == record.name
    assert "CLAIMED" == record.idempotency["outcome"]  # type: ignore[attr-defined]


def test_hook_errors_are_logged_on_the_user_logger(
    idempotency_store: InMemoryPersistenceLayer, caplog: pytest.LogCaptureFixture
) -> None:
    """A failing decision hook is reported through the configured logger, and swallowed."""

    def broken(decision: Any) -> None:
        raise ValueError("hook bug")

    config = IdempotencyConfig(decision_hook=broken, logger=logging.getLogger("myapp"))
    with caplog.at_level(logging.INFO):
        assert {"ok": 7} == make_handler(idempotency_store, config)(EVENT, None)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert ["myapp"] == [r.name for r in errors]
    assert errors[0].exc_info is not None


def test_default_logger_is_unchanged(
    idempotency_store: InMemoryPersistenceLayer, caplog: pytest.LogCaptureFixture
) -> None:
    """Without a logger option, lines stay on the ``idempotent_lambda`` logger."""
    with caplog.at_level(logging.INFO, logger="idempotent_lambda"):
        make_handler(idempotency_store, IdempotencyConfig())(EVENT, None)
    (record,) = caplog.records
    assert "idempotent_lambda" == record.name
    assert "CLAIMED" == record.idempotency["outcome"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("bad", [object(), "myapp", print])
def test_a_logger_must_look_like_one(bad: Any) -> None:
    """Something that is not a logger is refused when the config is built."""
    with pytest.raises(IdempotencyConfigError, match="logger"):
        IdempotencyConfig(logger=bad)


def test_logger_option_works_without_powertools() -> None:
    """The logger option never imports Powertools."""
    code = (
        "import logging, sys\n"
        "sys.modules['aws_lambda_powertools'] = None\n"
        "from idempotent_lambda import IdempotencyConfig, InMemoryPersistenceLayer, idempotent\n"
        "config = IdempotencyConfig(logger=logging.getLogger('app'))\n"
        "h = idempotent(persistence_store=InMemoryPersistenceLayer(), config=config)(\n"
        "    lambda event, context: 1)\n"
        "assert h({'a': 1}, None) == 1\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
