"""EMF metrics: what each decision counts, and documents that follow the EMF specification."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import threading
from typing import Any

import pytest

from idempotent_lambda import (
    Decision,
    IdempotencyAlreadyInProgressError,
    IdempotencyConfig,
    IdempotencyConfigError,
    IdempotencyPersistenceLayerError,
    IdempotencyRecord,
    InMemoryPersistenceLayer,
    Outcome,
    Status,
    idempotent,
)
from idempotent_lambda.metrics import EMFMetrics, Metric, decision_metrics
from idempotent_lambda.testing import FakeLambdaContext, ManualClock
from tests.unit._doubles import Decisions, SpyStore

# --- a structural validator of the EMF specification ---------------------------------------
# https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html

_UNITS = {
    "Seconds", "Microseconds", "Milliseconds", "Bytes", "Kilobytes", "Megabytes", "Gigabytes",
    "Terabytes", "Bits", "Kilobits", "Megabits", "Gigabits", "Terabits", "Percent", "Count",
    "Bytes/Second", "Kilobytes/Second", "Megabytes/Second", "Gigabytes/Second",
    "Terabytes/Second", "Bits/Second", "Kilobits/Second", "Megabits/Second", "Gigabits/Second",
    "Terabits/Second", "Count/Second", "None",
}  # fmt: skip


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def assert_valid_emf(document: dict[str, Any]) -> None:
    """Fail unless ``document`` has the structure the EMF specification requires."""
    assert isinstance(document, dict)
    metadata = document["_aws"]
    assert isinstance(metadata, dict)
    assert set(metadata) <= {"Timestamp", "CloudWatchMetrics", "LogGroupName"}
    assert isinstance(metadata["Timestamp"], int)
    assert not isinstance(metadata["Timestamp"], bool)
    assert metadata["Timestamp"] > 1_000_000_000_000  # epoch milliseconds, not seconds
    directives = metadata["CloudWatchMetrics"]
    assert isinstance(directives, list)
    assert directives
    for directive in directives:
        assert set(directive) == {"Namespace", "Dimensions", "Metrics"}
        namespace = directive["Namespace"]
        assert isinstance(namespace, str)
        assert 1 <= len(namespace) <= 255
        dimension_sets = directive["Dimensions"]
        assert isinstance(dimension_sets, list)
        assert dimension_sets
        for dimension_set in dimension_sets:
            assert isinstance(dimension_set, list)
            assert len(dimension_set) <= 30
            for name in dimension_set:
                assert isinstance(name, str)
                assert name in document  # each dimension is a top-level key
                assert isinstance(document[name], str)
        metrics = directive["Metrics"]
        assert isinstance(metrics, list)
        assert 1 <= len(metrics) <= 100
        names = [metric["Name"] for metric in metrics]
        assert len(names) == len(set(names))
        for metric in metrics:
            assert set(metric) <= {"Name", "Unit", "StorageResolution"}
            assert isinstance(metric["Name"], str)
            assert 1 <= len(metric["Name"]) <= 1024
            assert metric["Unit"] in _UNITS
            assert metric["Name"] in document  # each metric value is a top-level key
            value = document[metric["Name"]]
            if isinstance(value, list):
                assert 1 <= len(value) <= 100
                assert all(_is_number(v) for v in value)
            else:
                assert _is_number(value)


def documents(stream: io.StringIO) -> list[dict[str, Any]]:
    """Return the EMF documents written to ``stream``, each validated."""
    docs = [json.loads(line) for line in stream.getvalue().splitlines()]
    for doc in docs:
        assert_valid_emf(doc)
    return docs


def metric_names(doc: dict[str, Any]) -> list[str]:
    """Return the metric names a document declares."""
    return [m["Name"] for d in doc["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]]


def test_validator_rejects_a_document_missing_a_dimension_key() -> None:
    """The validator catches a declared dimension that is not a top-level key."""
    bad = {
        "_aws": {
            "Timestamp": 1_767_225_600_000,
            "CloudWatchMetrics": [
                {
                    "Namespace": "N",
                    "Dimensions": [["service"]],
                    "Metrics": [{"Name": "A", "Unit": "Count"}],
                }
            ],
        },
        "A": 1,
    }
    with pytest.raises(AssertionError):
        assert_valid_emf(bad)
    assert_valid_emf({**bad, "service": "s"})


# --- what each decision counts -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("decision", "expected"),
    [
        (Decision(Outcome.CLAIMED, "f", "k", 1.5, 3.0, 2), ["Claimed"]),
        (Decision(Outcome.TAKEN_OVER, "f", "k", 1.0, 3.0, 2), ["TakenOver"]),
        (Decision(Outcome.REPLAYED, "f", "k", 1.0, None, 1, "store"), ["Replayed"]),
        (Decision(Outcome.REPLAYED, "f", "k", source="cache"), ["Replayed", "ReplayedFromCache"]),
        (
            Decision(Outcome.REPLAYED, "f", "k", 2.0, None, 3, "wait"),
            ["Replayed", "WaitedAndReplayed"],
        ),
        (Decision(Outcome.IN_PROGRESS, "f", "k", 1.0, None, 1), ["InProgressConflict"]),
        (Decision(Outcome.VALIDATION_FAILED, "f", "k", 1.0, None, 1), ["ValidationFailed"]),
        (Decision(Outcome.RELEASED, "f", "k", 1.0, 1.0, 2), ["Released"]),
        (Decision(Outcome.LEASE_LOST, "f", "k", 1.0, 1.0, 2), ["LeaseLost"]),
        (Decision(Outcome.UNSTORABLE, "f", "k", 1.0, 1.0, 2), ["UnstorableResult"]),
        (Decision(Outcome.SKIPPED, "f"), ["NoKeySkipped"]),
        (Decision(Outcome.DISABLED, "f"), ["Disabled"]),
        (
            Decision(Outcome.STORE_ERROR, "f", "k", error="Throttled", operation="claim"),
            ["StoreErrors", "StoreErrorsClaim"],
        ),
        (
            Decision(Outcome.COMPLETE_FAILED, "f", "k", 1.0, 1.0, 1, operation="complete"),
            ["CompleteFailed", "StoreErrors", "StoreErrorsComplete"],
        ),
        (
            Decision(Outcome.RELEASE_FAILED, "f", "k", 1.0, 1.0, 1, operation="release"),
            ["ReleaseFailed", "StoreErrors", "StoreErrorsRelease"],
        ),
    ],
)
def test_each_decision_counts_its_metrics(decision: Decision, expected: list[str]) -> None:
    """Every outcome maps to its counters, plus store latency and calls when the store was used."""
    metrics = decision_metrics(decision)
    counters = [m.name for m in metrics if m.name not in {"StoreLatency", "StoreCalls"}]
    assert expected == counters
    assert all(m.unit == "Count" and m.value == 1 for m in metrics if m.name in expected)
    if decision.store_calls:
        assert Metric("StoreLatency", "Milliseconds", decision.store_ms) in metrics
        assert Metric("StoreCalls", "Count", decision.store_calls) in metrics
    else:
        assert not {"StoreLatency", "StoreCalls"} & {m.name for m in metrics}


def test_every_outcome_is_counted() -> None:
    """No outcome is silently dropped: each yields at least one counter."""
    for outcome in Outcome:
        assert decision_metrics(Decision(outcome, "f", operation="claim"))


# --- end to end through the decorators -----------------------------------------------------------

EVENT = {"order_id": 7}


def make_handler(store: Any, hook: Any, **options: Any) -> Any:
    """Return an idempotent handler reporting to ``hook``."""
    config = IdempotencyConfig(event_key_jmespath="order_id", decision_hook=hook, **options)

    @idempotent(persistence_store=store, config=config, key_prefix="orders")
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        if event.get("fail"):
            raise RuntimeError("boom")
        return {"ok": event["order_id"]}

    return handler


def test_first_call_and_replay_emit_valid_documents(
    idempotency_store: InMemoryPersistenceLayer, idempotency_clock: ManualClock
) -> None:
    """First call: Claimed, 2 store calls; replay: Replayed, 1 store call; each one document."""
    out = io.StringIO()
    metrics = EMFMetrics("Orders", service="orders", stream=out, clock=idempotency_clock)
    handler = make_handler(idempotency_store, metrics)

    handler(EVENT, None)
    handler(EVENT, None)

    first, replay = documents(out)
    assert ["Claimed", "StoreLatency", "StoreCalls"] == metric_names(first)
    assert 2 == first["StoreCalls"]
    assert ["Replayed", "StoreLatency", "StoreCalls"] == metric_names(replay)
    assert 1 == replay["StoreCalls"]
    for doc in (first, replay):
        assert idempotency_clock.now_ms() == doc["_aws"]["Timestamp"]
        assert "Orders" == doc["_aws"]["CloudWatchMetrics"][0]["Namespace"]
        assert [["service"]] == doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
        assert "orders" == doc["service"]
        assert isinstance(doc["StoreLatency"], float)


def test_cache_hit_costs_no_store_call(idempotency_store: InMemoryPersistenceLayer) -> None:
    """A local-cache replay counts ReplayedFromCache and reports no store latency."""
    out = io.StringIO()
    handler = make_handler(idempotency_store, EMFMetrics("N", stream=out), use_local_cache=True)
    handler(EVENT, None)
    handler(EVENT, None)
    cached = documents(out)[-1]
    assert ["Replayed", "ReplayedFromCache"] == metric_names(cached)


def test_raised_handler_counts_released(idempotency_store: InMemoryPersistenceLayer) -> None:
    """A handler that raises is counted as Released."""
    out = io.StringIO()
    handler = make_handler(idempotency_store, EMFMetrics("N", stream=out))
    with pytest.raises(RuntimeError):
        handler({"order_id": 1, "fail": True}, None)
    (doc,) = documents(out)
    assert "Released" in metric_names(doc)
    assert 2 == doc["StoreCalls"]


def test_in_progress_conflict_and_waited_replay(
    idempotency_store: InMemoryPersistenceLayer, idempotency_clock: ManualClock
) -> None:
    """A live holder gives InProgressConflict; with waiting on, a completed holder is replayed."""
    out = io.StringIO()
    metrics = EMFMetrics("N", stream=out)
    holder = IdempotencyRecord(
        idempotency_key=_key_of(7),
        status=Status.IN_PROGRESS,
        expiry_timestamp=idempotency_clock.now_ms() // 1000 + 3600,
        in_progress_expiry_timestamp=idempotency_clock.now_ms() + 60_000,
        owner="other",
    )
    now = idempotency_clock.now_ms()
    assert idempotency_store.claim(holder, now_ms=now, lease_cutoff_ms=now).claimed
    with pytest.raises(IdempotencyAlreadyInProgressError):
        make_handler(idempotency_store, metrics)(EVENT, None)
    assert "InProgressConflict" in metric_names(documents(out)[-1])

    class CompletingStore(SpyStore):
        def get(self, idempotency_key: str) -> IdempotencyRecord | None:
            done = IdempotencyRecord(
                idempotency_key=idempotency_key,
                status=Status.COMPLETED,
                expiry_timestamp=holder.expiry_timestamp,
                response_data='{"ok":7}',
                owner="other",
            )
            self.inner.complete(done)
            return super().get(idempotency_key)

    waiter = make_handler(
        CompletingStore(idempotency_store), metrics, wait_for_in_progress_seconds=5
    )
    assert {"ok": 7} == waiter(EVENT, FakeLambdaContext(60_000, clock=idempotency_clock))
    assert ["Replayed", "WaitedAndReplayed"] == metric_names(documents(out)[-1])[:2]


@pytest.mark.parametrize(
    ("failing", "raised", "outcome_metric"),
    [
        ("claim", IdempotencyPersistenceLayerError, None),
        ("complete", None, "CompleteFailed"),
        ("release", RuntimeError, "ReleaseFailed"),
    ],
)
def test_store_errors_are_counted_by_operation(
    idempotency_store: InMemoryPersistenceLayer,
    failing: str,
    raised: type[Exception] | None,
    outcome_metric: str | None,
) -> None:
    """A failing store call counts StoreErrors and StoreErrors<Operation>."""
    out = io.StringIO()
    decisions = Decisions()
    metrics = EMFMetrics("N", stream=out)

    def both(decision: Decision) -> None:
        decisions(decision)
        metrics(decision)

    handler = make_handler(SpyStore(idempotency_store, fail={failing}), both)
    event = {"order_id": 1, "fail": failing == "release"}
    with pytest.raises(raised) if raised else contextlib.nullcontext():
        handler(event, None)
    assert failing == decisions.last.operation
    names = metric_names(documents(out)[-1])
    assert "StoreErrors" in names
    assert "StoreErrors" + failing.capitalize() in names
    if outcome_metric:
        assert outcome_metric in names


def _key_of(order_id: int) -> str:
    from idempotent_lambda._identity import digest

    return f"orders#{digest(IdempotencyConfig(), order_id)}"


# --- dimensions, streams, buffering -------------------------------------------------------------


def test_default_stream_is_stdout_at_write_time(
    idempotency_store: InMemoryPersistenceLayer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a stream, documents go to sys.stdout as it is when writing (Lambda ships it)."""
    make_handler(idempotency_store, EMFMetrics("N"))(EVENT, None)
    (line,) = capsys.readouterr().out.splitlines()
    assert_valid_emf(json.loads(line))


def test_dimensions_service_and_function(monkeypatch: pytest.MonkeyPatch) -> None:
    """User dimensions, the service (argument or POWERTOOLS_SERVICE_NAME) and the function."""
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "from-env")
    out = io.StringIO()
    metrics = EMFMetrics("N", dimensions={"env": "prod"}, function_dimension=True, stream=out)
    metrics(Decision(Outcome.CLAIMED, "handler", "k", 1.0, 1.0, 2))
    (doc,) = documents(out)
    assert [["env", "service", "Function"]] == doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
    assert ("prod", "from-env", "handler") == (doc["env"], doc["service"], doc["Function"])

    out = io.StringIO()
    EMFMetrics("N", service="explicit", stream=out)(Decision(Outcome.SKIPPED, "f"))
    assert "explicit" == documents(out)[0]["service"]


def test_no_dimensions_gives_one_empty_dimension_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no dimension at all, the metrics are published without dimensions."""
    monkeypatch.delenv("POWERTOOLS_SERVICE_NAME", raising=False)
    out = io.StringIO()
    EMFMetrics("N", stream=out)(Decision(Outcome.SKIPPED, "f"))
    assert [[]] == documents(out)[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"]


def test_buffered_mode_aggregates_until_flush() -> None:
    """auto_flush=False sums counts and lists latencies until flush(); flush empties the buffer."""
    out = io.StringIO()
    metrics = EMFMetrics("N", service="s", auto_flush=False, stream=out)
    metrics(Decision(Outcome.CLAIMED, "f", "k", 2.0, 1.0, 2))
    metrics(Decision(Outcome.REPLAYED, "f", "k", 1.0, None, 1, "store"))
    metrics(Decision(Outcome.REPLAYED, "f", "k", 3.0, None, 1, "store"))
    assert "" == out.getvalue()

    metrics.flush()
    (doc,) = documents(out)
    assert (1, 2) == (doc["Claimed"], doc["Replayed"])
    assert [2.0, 1.0, 3.0] == doc["StoreLatency"]
    assert 4 == doc["StoreCalls"]

    metrics.flush()
    assert 1 == len(out.getvalue().splitlines())


def test_buffered_mode_groups_by_function_dimension() -> None:
    """Decisions of different functions land in separate documents with their own dimension."""
    out = io.StringIO()
    metrics = EMFMetrics("N", function_dimension=True, auto_flush=False, stream=out)
    metrics(Decision(Outcome.CLAIMED, "a"))
    metrics(Decision(Outcome.CLAIMED, "b"))
    metrics.flush()
    assert ["a", "b"] == [doc["Function"] for doc in documents(out)]


def test_buffer_flushes_itself_before_exceeding_the_value_limit() -> None:
    """Many buffered latencies never make a metric exceed 100 values in a document."""
    out = io.StringIO()
    metrics = EMFMetrics("N", auto_flush=False, stream=out)
    for _ in range(250):
        metrics(Decision(Outcome.REPLAYED, "f", "k", 1.0, None, 1, "store"))
    metrics.flush()
    docs = documents(out)
    assert 250 == sum(len(_as_list(doc["StoreLatency"])) for doc in docs)
    assert 250 == sum(doc["Replayed"] for doc in docs)


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_documents_split_at_100_metrics_and_100_values() -> None:
    """A series set above the EMF limits is split over several valid documents."""
    metrics = EMFMetrics("N", stream=io.StringIO())
    series = {f"M{i}": ("Count", [1.0]) for i in range(150)}
    series["Latency"] = ("Milliseconds", [float(i) for i in range(230)])
    docs = metrics._documents({"service": "s"}, series)
    for doc in docs:
        assert_valid_emf(doc)
    assert 150 == sum(1 for doc in docs for name in metric_names(doc) if name.startswith("M"))
    assert 230 == sum(len(_as_list(doc["Latency"])) for doc in docs if "Latency" in doc)


def test_concurrent_decisions_write_whole_lines() -> None:
    """Documents written from many threads never interleave."""
    out = io.StringIO()
    metrics = EMFMetrics("N", stream=out)

    def work() -> None:
        for _ in range(50):
            metrics(Decision(Outcome.CLAIMED, "f", "k", 1.0, 1.0, 2))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert 400 == len(documents(out))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"namespace": ""}, "namespace"),
        ({"namespace": "N", "dimensions": {"Claimed": "x"}}, "clashes"),
        ({"namespace": "N", "dimensions": {"StoreErrorsGet": "x"}}, "clashes"),
        ({"namespace": "N", "dimensions": {"_aws": "x"}}, "clashes"),
        ({"namespace": "N", "dimensions": {"env": ""}}, "value"),
        ({"namespace": "N", "dimensions": {":env": "x"}}, "name"),
        ({"namespace": "N", "dimensions": {f"d{i}": "x" for i in range(31)}}, "30"),
        ({"namespace": "N", "dimensions": {"Function": "x"}, "function_dimension": True}, "Func"),
    ],
)
def test_bad_settings_are_config_errors(kwargs: dict[str, Any], message: str) -> None:
    """Settings that would produce invalid EMF are refused when the hook is built."""
    with pytest.raises(IdempotencyConfigError, match=message):
        EMFMetrics(**kwargs)


def test_off_by_default_costs_nothing(
    idempotency_store: InMemoryPersistenceLayer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a decision hook nothing is printed, and the metrics module is never imported."""
    make_handler(idempotency_store, None)(EVENT, None)
    assert "" == capsys.readouterr().out
    code = (
        "import sys, idempotent_lambda\n"
        "assert 'idempotent_lambda.metrics' not in sys.modules\n"
        "assert not any(m.startswith('aws_lambda_powertools') for m in sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_works_without_powertools_installed() -> None:
    """EMF metrics never import Powertools (an import of it would fail here)."""
    code = (
        "import io, sys\n"
        "sys.modules['aws_lambda_powertools'] = None\n"
        "from idempotent_lambda import Decision, Outcome\n"
        "from idempotent_lambda.metrics import EMFMetrics\n"
        "out = io.StringIO()\n"
        "EMFMetrics('N', stream=out)(Decision(Outcome.CLAIMED, 'f'))\n"
        "assert 'Claimed' in out.getvalue()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
