"""An embedded DynamoDB-compatible server (moto's server mode) on 127.0.0.1 for local runs."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

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
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request

    from idempotent_lambda.testing import serialise_moto_writes

    serialise_moto_writes()  # moto's conditional writes race; DynamoDB's do not

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()
