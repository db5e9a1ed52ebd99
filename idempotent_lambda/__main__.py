"""``python -m idempotent_lambda``: the operator command line (see `idempotent_lambda.cli`)."""

from idempotent_lambda.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
