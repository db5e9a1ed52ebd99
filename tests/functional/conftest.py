"""Fixtures for the functional tests: a moto server with the sample app on it, the built docs site.

The sample's handlers read their tables and endpoint from the environment at import, as in
Lambda, so one app (one server, one set of tables and a bucket made from template.yaml) serves
the session; each test gets it under a fresh run id (new keys, customers, orders). The
environment the app needs is set for each test with monkeypatch, so nothing leaks into other
test directories.
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from samples.local_app import LocalApp, build_app, watching

_HERE = Path(__file__).parent
_ROOT = _HERE.parents[1]
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


@contextlib.contextmanager
def patient_sample() -> Iterator[None]:
    """Give the sample's invocations and AWS clients margins that only a hang exhausts.

    Deployed, each function has 10 s and its clients a 3 s read timeout. On a loaded test machine
    the in-process moto server can answer more slowly than that; a retried request or a lease cut
    short would then fail the checks that count requests and executions. Nothing else changes.
    """
    from botocore.config import Config

    import samples.demo
    import samples.local_app
    from samples.app import aws
    from samples.local_lambda import invoke

    patient = Config(connect_timeout=60, read_timeout=60)
    build_client = aws.SESSION.client

    def client(*args: Any, config: Config | None = None, **kwargs: Any) -> Any:
        return build_client(
            *args, config=patient if config is None else config.merge(patient), **kwargs
        )

    patient_invoke = functools.partial(invoke, timeout_s=300)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(aws.SESSION, "client", client)
        patch.setattr(aws, "_CLIENT_CONFIG", aws._CLIENT_CONFIG.merge(patient))
        patch.setattr(samples.local_app, "invoke", patient_invoke)
        patch.setattr(samples.demo, "invoke", patient_invoke)
        yield


@pytest.fixture(scope="session")
def sample_app() -> Iterator[LocalApp]:
    """Start a moto server, create the template's tables, bucket, bus and queue on it, load the
    handlers."""
    from idempotent_lambda.testing import local_dynamodb

    saved = dict(os.environ)
    with patient_sample(), local_dynamodb() as endpoint:
        try:
            os.environ.update(_DUMMY_AWS)
            app = build_app(endpoint, s3_endpoint_url=endpoint, events_endpoint_url=endpoint)
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
        if forked.outbox is not None:  # no message of an earlier test reaches this one's consumer
            messages = forked.outbox.queue.receive()
            forked.outbox.queue.settle(messages, {"batchItemFailures": []})
        yield forked


@pytest.fixture(scope="session")
def docs_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the docs site once (it needs the mermaid that `make mermaid` installs)."""
    out = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--quiet", "--site-dir", str(out)],
        cwd=_ROOT,
        check=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=600,
    )
    return out
