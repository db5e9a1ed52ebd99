"""The `key` command: print the key a decorated handler gives an event, or say why it has none.

The key is found by running the event through the decorator itself (`_dry_run`), so it follows
the record format, the default prefix and each adapter's scope rules exactly.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from idempotent_lambda.cli._dry_run import ADAPTERS, NO_KEY_MATERIAL, Derived, DryRun
from idempotent_lambda.cli._output import ERROR, NOT_FOUND, OK, CliError, Screen
from idempotent_lambda.config import IdempotencyConfig


def compute_key(args: argparse.Namespace, screen: Screen) -> int:
    """`key`: print the key (and validation hash) of an event, or of each record of a batch."""
    options: dict[str, Any] = {
        "event_key_jmespath": args.jmespath,
        "payload_validation_jmespath": args.validation_jmespath,
        "hash_function": args.hash,
    }
    if args.record_format is not None:  # else whatever IdempotencyConfig() defaults to
        options["record_format"] = args.record_format
    http: dict[str, Any] = {}
    if args.decorator == "idempotent_http":
        http = {
            "header_name": args.header_name,
            "caller": args.caller,
            "caller_scope": args.caller_scope,
        }
        if args.methods:
            http["methods"] = [method.strip() for method in args.methods.split(",")]
    dry_run = DryRun(
        args.decorator,
        config=IdempotencyConfig(**options),
        key_prefix=args.prefix,
        handler=args.handler,
        function_name=args.function_name,
        options=http,
    )
    event = load_json(args.event)
    derived = dry_run.derive(event)
    if args.decorator == "idempotent" and _looks_like_an_adapters(event):
        screen.note(
            "note: this is the key @idempotent gives the whole event; a function decorated with "
            "an adapter (idempotent_http, idempotent_sqs_handler, ...) keys it otherwise: pass "
            "--decorator"
        )
    if (
        args.prefix is None
        and args.function_name is None
        and not os.environ.get("AWS_LAMBDA_FUNCTION_NAME")
    ):
        screen.note(
            "note: no --function-name and no AWS_LAMBDA_FUNCTION_NAME: this is the key of a "
            "local run; a deployed function's key starts with its function name"
        )
    return _show(derived, screen, batch=dry_run.adapter.batch is not None, as_json=args.json)


def _looks_like_an_adapters(event: Any) -> bool:
    """Tell whether ``event`` is a batch or an HTTP proxy event, which adapters usually take."""
    return isinstance(event, dict) and (
        isinstance(event.get("Records"), list)
        or isinstance(event.get("records"), dict)  # Kafka's
        or "httpMethod" in event
        or "routeKey" in event
    )


def _show(derived: list[Derived], screen: Screen, *, batch: bool, as_json: bool) -> int:
    """Print the keys; return 0, 1 when some record runs without a key, 2 when one is refused."""
    if not batch:
        (one,) = derived
        if one.key is None and (one.refused or not as_json):
            raise CliError(one.reason or NO_KEY_MATERIAL, ERROR if one.refused else NOT_FOUND)
    for index, one in enumerate(derived):
        if as_json:
            shown: dict[str, Any] = {"record": index} if batch else {}
            shown |= {"key": one.key, "validation_hash": one.validation_hash}
            if one.key is None:
                shown["reason"] = one.reason
            screen.json(shown)
        elif one.key is None:
            screen.out("-")
            screen.note(f"record {index}: {one.reason}")
        elif one.validation_hash is None:
            screen.out(one.key)
        elif batch:
            screen.out(f"{one.key}  validation {one.validation_hash}")
        else:
            screen.out(f"key         {one.key}\nvalidation  {one.validation_hash}")
    if any(one.refused for one in derived):
        return ERROR
    return NOT_FOUND if any(one.key is None for one in derived) else OK


def load_json(path: str) -> Any:
    """Return the JSON document in file ``path`` (``-``: stdin)."""
    try:
        if path == "-":
            return json.load(sys.stdin)
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise CliError(f"{path} is not JSON: {exc}") from exc


def add_key_options(key: argparse.ArgumentParser) -> None:
    """Add the `key` command's options: those of the decorator and config the function uses."""
    where = key.add_mutually_exclusive_group(required=True)
    where.add_argument("--prefix", help="the key prefix (the decorator's key_prefix)")
    where.add_argument(
        "--handler",
        metavar="MODULE:QUALNAME",
        help="derive the default prefix of this function instead (it is not imported)",
    )
    key.add_argument(
        "--function-name",
        metavar="NAME",
        help="Lambda function name for --handler (default: AWS_LAMBDA_FUNCTION_NAME)",
    )
    key.add_argument(
        "--decorator",
        choices=[name for name, adapter in ADAPTERS.items() if adapter.load() is not None],
        default="idempotent",
        help="what the function is decorated with (idempotent)",
    )
    key.add_argument(
        "--record-format",
        choices=["powertools", "native"],
        help="the config's record_format (default: IdempotencyConfig's)",
    )
    key.add_argument("--jmespath", default="", metavar="EXPR", help="event_key_jmespath")
    key.add_argument(
        "--validation-jmespath", default="", metavar="EXPR", help="payload_validation_jmespath"
    )
    key.add_argument(
        "--hash", metavar="NAME", help="hash_function (default: the record format's own)"
    )
    http = key.add_argument_group("idempotent_http options")
    http.add_argument("--header-name", default="Idempotency-Key", metavar="NAME")
    http.add_argument("--caller", metavar="EXPR", help="caller=, as a JMESPath expression")
    http.add_argument("--caller-scope", choices=["caller", "shared"], default="caller")
    http.add_argument("--methods", metavar="M,M", help="methods=, e.g. POST,PATCH")
    key.add_argument(
        "event", metavar="EVENT.json", help="the event (or payload) as JSON; - reads stdin"
    )
