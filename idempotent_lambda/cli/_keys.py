"""The `key` command: print the key a decorated handler gives an event, or say why it has none.

The key is found by running the event through the decorator itself (`_dry_run`), so it follows
the record format, the default prefix and each adapter's scope rules exactly.

What it hashes with (`key_settings`): with ``--handler MODULE:QUALNAME`` the handler's module is
imported, as Lambda imports it (from the current directory, with ``AWS_LAMBDA_FUNCTION_NAME``
set), and the settings its decorator was given are read from the decorated function
(`idempotent_lambda._setup`): the decorator, its key prefix, and every config field and option
that changes a key. An option given on the command line that disagrees with them is refused, so
a key printed for a handler is the key that handler stores. Without a decorated handler the key
comes from the options alone, and a note on stderr says so and what was hashed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import operator
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from idempotent_lambda._setup import DecoratorSetup, setup_of
from idempotent_lambda.cli._dry_run import ADAPTERS, NO_KEY_MATERIAL, Derived, DryRun, environment
from idempotent_lambda.cli._output import ERROR, NOT_FOUND, OK, CliError, Screen
from idempotent_lambda.config import IdempotencyConfig

#: The config fields that change a key or a validation hash; the others never do.
KEY_CONFIG = (
    "event_key_jmespath",
    "payload_validation_jmespath",
    "jmespath_options",
    "raise_on_no_idempotency_key",
    "hash_function",
    "record_format",
)
#: The decorator options that change a key (HTTP scope and methods, batch source scope).
KEY_OPTIONS = ("header_name", "require_key", "methods", "caller", "caller_scope", "source_scope")
_DEFAULTS = {"header_name": "Idempotency-Key", "caller_scope": "caller", "source_scope": "source"}


@dataclass(frozen=True)
class KeySettings:
    """Everything the dry run of `key` needs.

    Attributes:
        decorator: A name of `ADAPTERS`.
        config: The config, with only the fields of `KEY_CONFIG` taken from the function's.
        key_prefix: The decorator's ``key_prefix``.
        named: ``MODULE:QUALNAME`` of the function naming the default prefix, if known.
        options: The decorator's options of `KEY_OPTIONS`.
        read_from: The handler whose settings these are; None when they are the options given.
    """

    decorator: str
    config: IdempotencyConfig
    key_prefix: str | None
    named: str | None
    options: Mapping[str, Any] = field(default_factory=dict)
    read_from: str | None = None

    def describe(self) -> str:
        """Return what is hashed, in a line: the decorator, the prefix and the key settings."""
        parts = [self.decorator]
        if self.key_prefix is not None:
            parts.append(f"key_prefix {self.key_prefix!r}")
        parts += [
            f"event_key_jmespath {self.config.event_key_jmespath!r}",
            f"record_format {self.config.record_format}",
            f"hash {self.config.hash_name}",
        ]
        if self.config.payload_validation_jmespath:
            parts.append(f"payload_validation_jmespath {self.config.payload_validation_jmespath!r}")
        parts += [f"{name} {value!r}" for name, value in self.options.items() if value is not None]
        return ", ".join(parts)


def key_settings(args: argparse.Namespace) -> KeySettings:
    """Return the settings to hash with: the handler's, when ``--handler`` names a decorated one.

    Raises:
        CliError: The handler cannot be imported or found, or an option disagrees with it.
    """
    if args.handler and not args.no_import:
        setup = setup_of(import_handler(args.handler, args.function_name))
        if setup is not None:
            return _refuse_disagreement(args, _from_setup(setup, args.handler))
    config: dict[str, Any] = {
        "event_key_jmespath": args.jmespath or "",
        "payload_validation_jmespath": args.validation_jmespath or "",
        "hash_function": args.hash,
    }
    if args.record_format is not None:  # else whatever IdempotencyConfig() defaults to
        config["record_format"] = args.record_format
    decorator = args.decorator or "idempotent"
    options: dict[str, Any] = {}
    if decorator == "idempotent_http":
        options = {
            "header_name": args.header_name or _DEFAULTS["header_name"],
            "caller": args.caller,
            "caller_scope": args.caller_scope or _DEFAULTS["caller_scope"],
        }
        if args.methods:
            options["methods"] = _methods(args.methods)
    elif ADAPTERS[decorator].batch is not None and args.source_scope:
        options["source_scope"] = args.source_scope
    return KeySettings(
        decorator, IdempotencyConfig(**config), args.prefix, args.handler, options=options
    )


def import_handler(handler: str, function_name: str | None) -> object:
    """Import ``MODULE:QUALNAME`` as Lambda would, from the current directory; return it.

    Raises:
        CliError: ``handler`` is malformed, its module cannot be imported, or it has no such
            attribute.
    """
    module_name, _, qualname = handler.partition(":")
    if not module_name or not qualname:
        raise CliError("--handler takes MODULE:QUALNAME, e.g. app:lambda_handler")
    here = os.getcwd()
    sys.path.insert(0, here)  # Lambda imports the handler from the function's code directory
    try:
        with environment(function_name):
            found: object = importlib.import_module(module_name)
    except Exception as exc:
        raise CliError(
            f"cannot import {module_name} for --handler ({type(exc).__name__}: {exc}): run from "
            "the function's code directory with the environment it needs, or pass --no-import "
            "to hash the options alone"
        ) from exc
    finally:
        with contextlib.suppress(ValueError):  # unless the module took it off itself
            sys.path.remove(here)
    for part in qualname.split("."):
        if not hasattr(found, part):
            raise CliError(f"{module_name} has no {qualname} (--handler {handler})")
        found = getattr(found, part)
    return found


def _from_setup(setup: DecoratorSetup, handler: str) -> KeySettings:
    if setup.decorator not in ADAPTERS:
        raise CliError(f"{handler} is decorated with {setup.decorator}, which key cannot run")
    given = setup.options.get("config") or IdempotencyConfig()
    config = IdempotencyConfig(**{name: getattr(given, name) for name in KEY_CONFIG})
    return KeySettings(
        setup.decorator,
        config,
        setup.options.get("key_prefix"),
        f"{setup.module}:{setup.qualname}",
        {name: setup.options[name] for name in KEY_OPTIONS if name in setup.options},
        read_from=handler,
    )


def _refuse_disagreement(args: argparse.Namespace, read: KeySettings) -> KeySettings:
    """Return ``read``, unless an option given on the command line says otherwise."""
    theirs = {**_DEFAULTS, **read.options}
    compared: list[tuple[str, Any, str, Any, Callable[[Any, Any], bool]]] = [
        ("--decorator", args.decorator, "decorator", read.decorator, operator.eq),
        (
            "--jmespath",
            args.jmespath,
            "event_key_jmespath",
            read.config.event_key_jmespath,
            operator.eq,
        ),
        (
            "--validation-jmespath",
            args.validation_jmespath,
            "payload_validation_jmespath",
            read.config.payload_validation_jmespath,
            operator.eq,
        ),
        ("--hash", args.hash, "hash", read.config.hash_name, operator.eq),
        (
            "--record-format",
            args.record_format,
            "record_format",
            read.config.record_format,
            operator.eq,
        ),
        ("--header-name", args.header_name, "header_name", theirs["header_name"], _same_header),
        ("--caller", args.caller, "caller", theirs.get("caller"), operator.eq),
        ("--caller-scope", args.caller_scope, "caller_scope", theirs["caller_scope"], operator.eq),
        ("--methods", args.methods, "methods", theirs.get("methods"), _same_methods),
        ("--source-scope", args.source_scope, "source_scope", theirs["source_scope"], operator.eq),
    ]
    for flag, given, name, found, same in compared:
        if given is not None and not same(given, found):
            raise CliError(
                f"{flag} {given!r} disagrees with {read.read_from}'s {name} {found!r}: the "
                "handler's own settings are used, so drop the option (or pass --no-import to "
                "hash the options alone)"
            )
    return read


def _same_header(given: str, found: Any) -> bool:
    return isinstance(found, str) and given.lower() == found.lower()


def _same_methods(given: str, found: Any) -> bool:
    return found is not None and set(_methods(given)) == {str(m).upper() for m in found}


def _methods(text: str) -> list[str]:
    return [method.strip().upper() for method in text.split(",") if method.strip()]


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
