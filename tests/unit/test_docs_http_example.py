"""The example of docs/http.md runs: ``caller=`` separates the users of a Lambda authorizer."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "http_caller.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("http_caller_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_retry_replays_and_another_user_runs_the_handler() -> None:
    """Alice's retry replays; Bob, with the same key, gets his own run, not Alice's response."""
    example = load()
    first = example.create_order(example.request("alice", "k-1"), None)
    retry = example.create_order(example.request("alice", "k-1"), None)
    other = example.create_order(example.request("bob", "k-1"), None)
    assert 201 == first["statusCode"]
    assert "true" == retry["headers"]["Idempotent-Replayed"]
    assert "Idempotent-Replayed" not in other.get("headers", {})
    assert 201 == other["statusCode"]
