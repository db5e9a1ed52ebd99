"""Fixtures for the sample app's functional tests: a moto server and the sample app on it.

The sample's handlers read their tables and endpoint from the environment at import, as in
Lambda, so one app (one server, one set of tables and a bucket made from template.yaml) serves
the session; each test gets it under a fresh run id (new keys, customers, orders). The
environment the app needs is set for each test with monkeypatch, so nothing leaks into other
test directories.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from samples.scenario import LocalApp, build_app, watching

_HERE = Path(__file__).parent
_DUMMY_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests here that run the sample app as ``integration`` (it talks to a server)."""
    for item in items:
        if _HERE in item.path.parents and "sample_app" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def sample_app() -> Iterator[LocalApp]:
    """Start a moto server, create the template's tables and bucket on it, load the handlers."""
    from idempotent_lambda.testing import local_dynamodb

    saved = dict(os.environ)
    with local_dynamodb() as endpoint:
        try:
            os.environ.update(_DUMMY_AWS)
            app = build_app(endpoint, s3_endpoint_url=endpoint)
            app.environment.update(_DUMMY_AWS)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        yield app


@pytest.fixture
def app(sample_app: LocalApp, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalApp]:
    """Return the sample app under a new run id, its environment set, its decisions collected."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in sample_app.environment.items():
        monkeypatch.setenv(name, value)
    with watching(sample_app.fork()) as forked:
        yield forked
