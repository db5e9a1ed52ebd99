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
from idempotent_lambda.cli._settings import key_settings


def compute_key(args: argparse.Namespace, screen: Screen) -> int:
    """`key`: print the key (and validation hash) of an event, or of each record of a batch."""
    settings = key_settings(args)
    if settings.read_from is not None:
        screen.note(
            f"note: hashing with the settings of {settings.read_from}: {settings.describe()}"
        )
    elif args.handler and not args.no_import:
        screen.note(
            f"note: {args.handler} is not decorated by idempotent_lambda, so this key uses the "
            f"options given alone: {settings.describe()}"
        )
    elif args.handler:
        screen.note(
            f"note: --no-import: this key uses the options given alone: {settings.describe()}"
        )
    dry_run = DryRun(
        settings.decorator,
        config=settings.config,
        key_prefix=settings.key_prefix,
        handler=settings.named,
        function_name=args.function_name,
        options=settings.options,
    )
    event = load_json(args.event)
    derived = dry_run.derive(event)
    if settings.decorator == "idempotent" and _looks_like_an_adapters(event):
        screen.note(
            "note: this is the key @idempotent gives the whole event; a function decorated with "
            "an adapter (idempotent_http, idempotent_sqs_handler, ...) keys it otherwise: pass "
            "--decorator"
        )
    if (
        settings.key_prefix is None
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
    """Add the `key` command's options: those of the decorator and config the function uses.

    Options that describe the decoration default to None, so that `key_settings` can tell an
    option given from one left out when it reads a handler's own settings.
    """
    where = key.add_mutually_exclusive_group(required=True)
    where.add_argument("--prefix", help="the key prefix (the decorator's key_prefix)")
    where.add_argument(
        "--handler",
        metavar="MODULE:QUALNAME",
        help="the decorated function: its module is imported from the current directory and "
        "the decorator's own settings are used (the options below only for an undecorated "
        "function or with --no-import)",
    )
    key.add_argument(
        "--no-import",
        action="store_true",
        help="with --handler: do not import it; hash the options given, naming the default "
        "prefix after MODULE:QUALNAME",
    )
    key.add_argument(
        "--function-name",
        metavar="NAME",
        help="Lambda function name for --handler (default: AWS_LAMBDA_FUNCTION_NAME)",
    )
    key.add_argument(
        "--decorator",
        choices=[name for name, adapter in ADAPTERS.items() if adapter.load() is not None],
        help="what the function is decorated with (idempotent)",
    )
    key.add_argument(
        "--record-format",
        choices=["powertools", "native"],
        help="the config's record_format (default: IdempotencyConfig's)",
    )
    key.add_argument("--jmespath", metavar="EXPR", help="event_key_jmespath")
    key.add_argument("--validation-jmespath", metavar="EXPR", help="payload_validation_jmespath")
    key.add_argument(
        "--hash", metavar="NAME", help="hash_function (default: the record format's own)"
    )
    key.add_argument(
        "--source-scope",
        choices=["source", "shared", "powertools"],
        help="batch adapters' source_scope (source)",
    )
    http = key.add_argument_group("idempotent_http options")
    http.add_argument("--header-name", metavar="NAME", help="header_name (Idempotency-Key)")
    http.add_argument("--caller", metavar="EXPR", help="caller=, as a JMESPath expression")
    http.add_argument("--caller-scope", choices=["caller", "shared"], help="caller_scope (caller)")
    http.add_argument("--methods", metavar="M,M", help="methods=, e.g. POST,PATCH")
    key.add_argument(
        "event", metavar="EVENT.json", help="the event (or payload) as JSON; - reads stdin"
    )
