"""The argument parser: ``records {list,get,delete,release-stuck}``, ``key``, ``create-table``."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from idempotent_lambda import __version__
from idempotent_lambda.cli._connection import add_connection_options, add_schema_options

Command = Callable[[argparse.Namespace], int]

_EPILOG = """\
exit codes: 0 done, 1 nothing found, 2 error, 130 interrupted
examples:
  idempotent-lambda records list --table idempotency --stuck
  idempotent-lambda records get --table idempotency 'orders#3a7bd3...'
  idempotent-lambda records release-stuck --table idempotency --yes
  idempotent-lambda key --prefix orders --jmespath 'body.order_id' event.json
  idempotent-lambda create-table --table idempotency --endpoint-url http://localhost:8000
"""


def build_parser() -> argparse.ArgumentParser:
    """Return the parser; each leaf command stores its function as ``command``."""
    parser = argparse.ArgumentParser(
        prog="idempotent-lambda",
        description="Inspect and repair idempotency records; compute the key of an event.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")
    _add_records(commands)
    _add_key(commands)
    _add_create_table(commands)
    return parser


def _leaf(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    command: str,
    help_text: str,
) -> argparse.ArgumentParser:
    parser = commands.add_parser(name, help=help_text, description=help_text)
    parser.set_defaults(command=command)
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    return parser


def _table_leaf(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    command: str,
    help_text: str,
) -> argparse.ArgumentParser:
    parser = _leaf(commands, name, command, help_text)
    add_connection_options(parser)
    add_schema_options(parser)
    return parser


def _add_scan_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prefix", help="only keys that start with this")
    parser.add_argument(
        "--page-size", type=_positive, metavar="N", help="items per Scan/Query request"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress or summary on stderr")


def _add_records(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = commands.add_parser("records", help="list, show, delete or release records")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = _table_leaf(
        actions, "list", "list", "List records (keys, status, times; never results)."
    )
    _add_scan_options(listing)
    listing.add_argument(
        "--status",
        type=str.upper,
        choices=["IN_PROGRESS", "COMPLETED", "EXPIRED"],
        help="only records with this status (EXPIRED: expiration passed, not yet deleted by TTL)",
    )
    listing.add_argument(
        "--stuck", action="store_true", help="only IN_PROGRESS records whose lease has passed"
    )
    listing.add_argument("--limit", type=_positive, metavar="N", help="stop after N records")

    get = _table_leaf(
        actions, "get", "get", "Show one record, with its decoded result (or where S3 holds it)."
    )
    get.add_argument("key", metavar="KEY", help="the full key, e.g. 'orders#3a7bd3...'")
    get.add_argument("--no-data", action="store_true", help="do not show the stored result")

    delete = _table_leaf(
        actions,
        "delete",
        "delete",
        "Delete one record, so the next request with its key runs again.",
    )
    delete.add_argument("key", metavar="KEY", help="the full key")
    delete.add_argument(
        "--force", action="store_true", help="delete even an IN_PROGRESS record with a live lease"
    )

    release = _table_leaf(
        actions,
        "release-stuck",
        "release-stuck",
        "Delete IN_PROGRESS records whose lease has passed (dry run unless --yes).",
    )
    _add_scan_options(release)
    release.add_argument("--yes", action="store_true", help="really delete them")


def _add_key(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    key = _leaf(commands, "key", "key", "Print the idempotency key an event would get.")
    where = key.add_mutually_exclusive_group(required=True)
    where.add_argument("--prefix", help="the key prefix (the decorator's key_prefix)")
    where.add_argument(
        "--handler",
        metavar="MODULE:QUALNAME",
        help="derive the default prefix of this function instead",
    )
    key.add_argument(
        "--function-name",
        metavar="NAME",
        help="Lambda function name for --handler (default: AWS_LAMBDA_FUNCTION_NAME or 'local')",
    )
    key.add_argument("--jmespath", default="", metavar="EXPR", help="event_key_jmespath")
    key.add_argument(
        "--validation-jmespath", default="", metavar="EXPR", help="payload_validation_jmespath"
    )
    key.add_argument("--hash", default="sha256", metavar="NAME", help="hash_function (sha256)")
    key.add_argument("event", metavar="EVENT.json", help="the event or payload; - reads stdin")


def _add_create_table(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    create = _leaf(
        commands,
        "create-table",
        "create-table",
        "Create an on-demand idempotency table with TTL (for local development).",
    )
    add_connection_options(create)
    add_schema_options(create, names=("key_attr", "sort_key_attr", "expiry_attr"))
    create.add_argument("--no-wait", action="store_true", help="do not wait until ACTIVE")


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return value
