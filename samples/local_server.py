"""An embedded DynamoDB-compatible server (moto's server mode) on 127.0.0.1 for local runs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from idempotent_lambda.testing import local_dynamodb

_DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "local",
    "AWS_SECRET_ACCESS_KEY": "local",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@contextmanager
def dynamodb_endpoint(endpoint_url: str | None = None) -> Iterator[str]:
    """Yield a DynamoDB endpoint URL: ``endpoint_url`` if given, else a fresh embedded server.

    Dummy credentials are set for the embedded server only when none are configured, so
    pointing ``endpoint_url`` at DynamoDB Local or a real account keeps the user's own.
    """
    if endpoint_url is not None:
        yield endpoint_url
        return
    for name, value in _DUMMY_CREDENTIALS.items():
        os.environ.setdefault(name, value)
    with local_dynamodb() as endpoint:
        yield endpoint
