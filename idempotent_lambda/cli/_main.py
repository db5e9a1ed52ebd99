"""Entry point: parse, run one command, turn any failure into one line and an exit code."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from idempotent_lambda.cli._errors import ERROR, INTERRUPTED, CliError, explain, one_line
from idempotent_lambda.cli._parser import Command, build_parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``idempotent-lambda`` with ``argv`` (default: the process arguments).

    Returns:
        The exit code: 0 done, 1 nothing found, 2 error, 130 interrupted. Usage errors print
        argparse's message and return 2; ``--help`` returns 0.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and on usage errors
        return exc.code if isinstance(exc.code, int) else ERROR
    try:
        return _command(args.command)(args)
    except KeyboardInterrupt:
        _fail("interrupted")
        return INTERRUPTED
    except BrokenPipeError:  # e.g. `| head`: stop quietly, and keep Python from complaining
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ERROR
    except CliError as exc:
        _fail(str(exc))
        return exc.exit_code
    except Exception as exc:
        if args.debug:
            raise
        table = getattr(args, "table", None)
        endpoint = getattr(args, "endpoint_url", None) or os.environ.get(
            "AWS_ENDPOINT_URL_DYNAMODB"
        )
        message = explain(exc, table=table, endpoint=endpoint)
        if message is None:
            message = f"unexpected {type(exc).__name__}: {exc} (run with --debug for details)"
        _fail(message)
        return ERROR


def _command(name: str) -> Command:
    """Import the command's module only when it runs (``key`` never imports boto3)."""
    if name == "key":
        from idempotent_lambda.cli._key import compute_key

        return compute_key
    if name == "create-table":
        from idempotent_lambda.cli._create_table import create_table

        return create_table
    if name == "release-stuck":
        from idempotent_lambda.cli._release import release_stuck

        return release_stuck
    from idempotent_lambda.cli import _records

    commands: dict[str, Command] = {
        "list": _records.list_records,
        "get": _records.get_record,
        "delete": _records.delete_record,
    }
    return commands[name]


def _fail(message: str) -> None:
    print(f"idempotent-lambda: error: {one_line(message)}", file=sys.stderr)
