"""The parser, the `key` command, and the one error boundary of the CLI.

Each leaf command stores the function that runs it (`set_defaults(run=...)`); `main` calls
`args.run(args, screen)` and turns any failure into one line on stderr and an exit code.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from idempotent_lambda import __version__
from idempotent_lambda.cli import _connection, _doctor, _keys, _outbox, _records
from idempotent_lambda.cli._output import ERROR, INTERRUPTED, CliError, Screen
from idempotent_lambda.exceptions import IdempotencyError, IdempotencyPersistenceLayerError
from idempotent_lambda.persistence._aws import error_details

Command = Callable[[argparse.Namespace, Screen], int]

_EPILOG = """\
exit codes: 0 done, 1 nothing found (doctor: a check failed), 2 error, 130 interrupted
examples:
  idempotent-lambda records list --table idempotency --stuck
  idempotent-lambda records get --table idempotency 'orders#3a7bd3...'
  idempotent-lambda records release-stuck --table idempotency --yes
  idempotent-lambda key --prefix orders --jmespath 'body.order_id' event.json
  idempotent-lambda key --handler app:handler --function-name orders-prod sqs-event.json
  idempotent-lambda create-table --table idempotency --endpoint-url http://localhost:8000
  idempotent-lambda doctor --table idempotency --function orders-prod
  idempotent-lambda outbox list --table idempotency
  idempotent-lambda outbox republish --table idempotency 5b0c3f0e-...
"""

_CREDENTIAL_CODES = frozenset(
    {
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "SignatureDoesNotMatch",
        "IncompleteSignature",
        "InvalidClientTokenId",
        "ExpiredToken",
        "ExpiredTokenException",
        "MissingAuthenticationToken",
        "MissingAuthenticationTokenException",
    }
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run `idempotent-lambda` with `argv` (default: the process arguments).

    Returns:
        The exit code: 0 done, 1 nothing found, 2 error (usage errors too), 130 interrupted.
    """
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and on usage errors
        return exc.code if isinstance(exc.code, int) else ERROR
    screen = Screen(quiet=getattr(args, "quiet", False))
    try:
        code: int = args.run(args, screen)
    except KeyboardInterrupt:
        _fail(screen, "interrupted")
        return INTERRUPTED
    except BrokenPipeError:  # e.g. `| head`: stop quietly, and keep Python from complaining
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ERROR
    except CliError as exc:
        _fail(screen, str(exc))
        return exc.exit_code
    except Exception as exc:
        if args.debug:
            raise
        message = explain(
            exc, table=getattr(args, "table", None), endpoint=_connection.endpoint_of(args)
        )
        _fail(
            screen,
            message or f"unexpected {type(exc).__name__}: {exc} (run with --debug for details)",
        )
        return ERROR
    return code


def explain(exc: BaseException, *, table: str | None, endpoint: str | None) -> str | None:
    """Return a one-line explanation of a boto3/botocore or library error; None for others.

    A store error that wraps a botocore one (its `__cause__`) is explained by that cause.
    """
    from botocore import exceptions as bce

    if isinstance(exc, IdempotencyPersistenceLayerError) and isinstance(
        exc.__cause__, bce.ClientError | bce.BotoCoreError
    ):
        exc = exc.__cause__
    where = endpoint or "AWS"
    if isinstance(exc, bce.ClientError):
        code, message = error_details(exc)
        code = code or "Unknown"
        if code == "ResourceNotFoundException":
            return f"table {table!r} not found at {where} ({message})" if table else message
        if code in _CREDENTIAL_CODES:
            return f"AWS rejected the credentials ({code}): {message}"
        if code == "AccessDeniedException":
            return f"access denied to {exc.operation_name}: {message}"
        return f"DynamoDB {exc.operation_name} failed: {code}: {message}"
    if isinstance(exc, bce.NoCredentialsError | bce.PartialCredentialsError):
        return (
            "no usable AWS credentials: pass --profile or set AWS_PROFILE, or "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        )
    if isinstance(exc, bce.NoRegionError):
        return "no AWS region: pass --region or set AWS_REGION"
    if isinstance(exc, bce.EndpointConnectionError | bce.ConnectTimeoutError):
        return f"cannot reach DynamoDB at {where}: {exc}"
    if isinstance(exc, bce.ReadTimeoutError):
        return f"DynamoDB at {where} did not answer in time: {exc}"
    if isinstance(exc, bce.BotoCoreError | IdempotencyError):
        return str(exc)
    return None


def _fail(screen: Screen, message: str) -> None:
    screen.note(f"idempotent-lambda: error: {' '.join(message.split())}")


# --- the parser ------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """Return the parser; each leaf command stores the function that runs it as `run`.

    Commands are looked up on each build, so a test can replace one in its module.
    """
    parser = argparse.ArgumentParser(
        prog="idempotent-lambda",
        description="Inspect and repair idempotency records; compute the key of an event.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    commands = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")
    group = commands.add_parser("records", help="list, show, delete or release records")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing, get, delete, release = (
        _leaf(actions, name, run, text, table=True)
        for name, run, text in (
            ("list", _records.list_records, "List records (never results)."),
            ("get", _records.get_record, "Show one record; its result with --data."),
            ("delete", _records.delete_record, "Delete one record, so its key runs again."),
            (
                "release-stuck",
                _records.release_stuck,
                "Delete IN_PROGRESS records whose lease has passed (dry run unless --yes).",
            ),
        )
    )
    _add_scan_options(listing)
    listing.add_argument(
        "--status",
        type=_status,
        choices=["IN_PROGRESS", "COMPLETED", "EXPIRED"],
        help="only records with this status (EXPIRED: expiration passed, not yet deleted by "
        "TTL); IN_PROGRESS matches Powertools' INPROGRESS too",
    )
    listing.add_argument(
        "--stuck", action="store_true", help="only IN_PROGRESS records whose lease has passed"
    )
    listing.add_argument("--limit", type=_positive, metavar="N", help="stop after N records")

    get.add_argument("key", metavar="KEY", help="the full key, e.g. 'orders#3a7bd3...'")
    get.add_argument("--data", action="store_true", help="show the stored result (user data)")
    get.add_argument("--no-data", action="store_true", help=argparse.SUPPRESS)  # the old default
    get.add_argument(
        "--record-format",
        choices=["powertools", "native"],
        default=None,
        help="how --data decodes the result: the functions' record_format "
        "(default: IdempotencyConfig's)",
    )

    delete.add_argument("key", metavar="KEY", help="the full key")
    delete.add_argument(
        "--force", action="store_true", help="delete even an IN_PROGRESS record with a live lease"
    )
    delete.add_argument(
        "--yes", action="store_true", help="with --force: do not ask for confirmation"
    )

    _add_scan_options(release)
    release.add_argument("--yes", action="store_true", help="really delete them")

    outbox = commands.add_parser(
        "outbox", help="list unpublished outbox events, republish one or all older than an age"
    )
    outbox_actions = outbox.add_subparsers(dest="action", required=True, metavar="ACTION")
    listed = _leaf(
        outbox_actions,
        "list",
        _outbox.list_events,
        "List outbox events not yet published, oldest first, with their age.",
        table=True,
    )
    listed.add_argument("--all", action="store_true", help="published events too")
    again = _leaf(
        outbox_actions,
        "republish",
        _outbox.republish,
        "Put one outbox event (or every unpublished one older than --older-than) on "
        "EventBridge now, with its id, then mark it published.",
        table=True,
    )
    again.add_argument(
        "event_id", metavar="EVENT_ID", nargs="?", default=None, help="the event's id (outbox list)"
    )
    again.add_argument(
        "--older-than",
        metavar="SECONDS",
        type=int,
        default=None,
        help="every unpublished event at least this old instead of one (a Scan)",
    )
    again.add_argument("--event-bus-name", default=None, help="bus of an event emitted without one")
    _keys.add_key_options(
        _leaf(commands, "key", _keys.compute_key, "Print the idempotency key an event gets.")
    )
    create = _leaf(
        commands,
        "create-table",
        _records.create_table,
        "Create an on-demand idempotency table with TTL (for local development).",
    )
    _add_connection_options(create)
    _add_schema_options(create, names=("key_attr", "sort_key_attr", "expiry_attr"))
    create.add_argument("--no-wait", action="store_true", help="do not wait until ACTIVE")
    create.add_argument(
        "--outbox",
        action="store_true",
        help="also create the index of unpublished outbox events (for outbox.sweep_handler)",
    )
    doctor = _leaf(
        commands,
        "doctor",
        _doctor.run_doctor,
        "Check a table: key schema, TTL, recovery, capacity, global-table mode, and a role's "
        "permissions (exit 1 when a check fails).",
        table=True,
    )
    doctor.add_argument(
        "--outbox",
        action="store_true",
        help="check the outbox (stream, index, backlog) even if no outbox item is found",
    )
    who = doctor.add_mutually_exclusive_group()
    who.add_argument("--role", metavar="ARN", help="check this IAM role's permissions too")
    who.add_argument(
        "--function", metavar="NAME", help="check the permissions of this function's role too"
    )
    return parser


def _leaf(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    run: Command,
    help_text: str,
    *,
    table: bool = False,
) -> argparse.ArgumentParser:
    parser = commands.add_parser(name, help=help_text, description=help_text)
    parser.set_defaults(run=run)
    parser.add_argument("--json", action="store_true", help="print JSON Lines for scripts")
    if table:
        _add_connection_options(parser)
        _add_schema_options(parser)
    return parser


def _add_connection_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection")
    table = os.environ.get("IDEMPOTENCY_TABLE") or None
    group.add_argument(
        "--table",
        required=table is None,
        default=table,
        help="the idempotency table (default: IDEMPOTENCY_TABLE)",
    )
    group.add_argument(
        "--endpoint-url",
        help="a DynamoDB-compatible endpoint, e.g. http://localhost:8000 "
        "(default: AWS_ENDPOINT_URL_DYNAMODB, else AWS)",
    )
    group.add_argument("--region", help="AWS region (default: the profile's or AWS_REGION)")
    group.add_argument("--profile", help="AWS profile to take credentials from")


def _add_schema_options(parser: argparse.ArgumentParser, *, names: tuple[str, ...] = ()) -> None:
    group = parser.add_argument_group(
        "item layout", "match the DynamoDBPersistenceLayer arguments the functions use"
    )
    for name, default in _connection.store_attribute_defaults().items():
        if not names or name in names:
            shown = "none" if default is None else default
            group.add_argument(
                "--" + name.replace("_", "-"), default=default, metavar="NAME", help=f"({shown})"
            )
    if not names:
        group.add_argument(
            "--static-pk-value",
            metavar="VALUE",
            help="partition value when --sort-key-attr is set (idempotency#<function name>)",
        )


def _add_scan_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prefix", help="only keys that start with this")
    parser.add_argument(
        "--page-size", type=_positive, metavar="N", help="items per Scan/Query request"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress or summary on stderr")


def _status(text: str) -> str:
    """Read a status in any case, Powertools' spelling of IN_PROGRESS included."""
    upper = text.upper()
    return "IN_PROGRESS" if upper == "INPROGRESS" else upper


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return value
