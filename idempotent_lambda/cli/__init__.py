"""`idempotent-lambda`: the operator's command line for an idempotency table.

Inspect records (`records list`, `records get`), repair them (`records delete`,
`records release-stuck`), compute the key an event gets (`key`) and create a table for local
development (`create-table`). Run `idempotent-lambda --help` or `python -m idempotent_lambda
--help`; the production guide has examples.

Exit codes: 0 done, 1 nothing found (no such record, no key in the event), 2 error (one line on
stderr, never a traceback), 130 interrupted.
"""

from idempotent_lambda.cli._main import main

__all__ = ["main"]
