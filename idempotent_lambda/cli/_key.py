"""``key``: print the idempotency key an event gets, exactly as the decorators compute it."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

from idempotent_lambda._clock import SYSTEM_CLOCK
from idempotent_lambda._entry import default_prefix
from idempotent_lambda._identity import derive_invocation
from idempotent_lambda.cli import _views
from idempotent_lambda.cli._views import NOT_FOUND, OK, CliError
from idempotent_lambda.config import IdempotencyConfig


def compute_key(args: argparse.Namespace) -> int:
    """Derive the key (and validation hash) of the event in ``args.event``."""
    config = IdempotencyConfig(
        event_key_jmespath=args.jmespath,
        payload_validation_jmespath=args.validation_jmespath,
        hash_function=args.hash,
    )
    prefix = args.prefix or handler_prefix(args.handler, args.function_name)
    event = _load(args.event)
    invocation = derive_invocation(
        config, event, prefix=prefix, now_ms=SYSTEM_CLOCK.now_ms(), context=None
    )
    if invocation is None:
        message = (
            "the key expression finds nothing in this event: the function runs without "
            "idempotency (or raises IdempotencyKeyError with raise_on_no_idempotency_key=True)"
        )
        if args.json:
            _views.write_json({"key": None, "validation_hash": None, "reason": message})
            return NOT_FOUND
        raise CliError(message, NOT_FOUND)
    if args.json:
        _views.write_json({"key": invocation.key, "validation_hash": invocation.payload_hash})
    elif invocation.payload_hash is None:
        print(invocation.key)
    else:
        print(f"key         {invocation.key}\nvalidation  {invocation.payload_hash}")
    return OK


def handler_prefix(handler: str, function_name: str | None) -> str:
    """Return the default prefix of the function ``MODULE:QUALNAME`` in Lambda function ``name``.

    The function is not imported: a stand-in with its module and qualified name is enough for
    `default_prefix`, which reads ``AWS_LAMBDA_FUNCTION_NAME`` as the deployed function would.
    """
    module, _, qualname = handler.partition(":")
    if not module or not qualname:
        raise CliError("--handler takes MODULE:QUALNAME, e.g. app:lambda_handler")

    def stand_in() -> None: ...

    stand_in.__module__ = module
    stand_in.__qualname__ = qualname
    with _function_name(function_name):
        return default_prefix(stand_in)


@contextlib.contextmanager
def _function_name(name: str | None) -> Iterator[None]:
    variable = "AWS_LAMBDA_FUNCTION_NAME"
    if name is None:
        yield
        return
    before = os.environ.get(variable)
    os.environ[variable] = name
    try:
        yield
    finally:
        if before is None:
            del os.environ[variable]
        else:
            os.environ[variable] = before


def _load(path: str) -> Any:
    try:
        if path == "-":
            return json.load(sys.stdin)
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise CliError(f"{path} is not JSON: {exc}") from exc
