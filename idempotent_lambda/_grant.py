"""What the CDK construct granted a function: its key prefixes, and where it may offload.

`IdempotencyTable.grant_idempotency` (package `idempotent_lambda_cdk`) sets
`GRANTED_KEY_PREFIXES_ENV` on the function it grants: the key prefixes its IAM policy allows,
comma-separated. When the variable is set, a decorator whose key prefix is not among them fails
at decoration, before a deploy can fail every claim with AccessDenied. Without it (no construct,
a plain Powertools swap) nothing is checked.
"""

from __future__ import annotations

import os

from idempotent_lambda.exceptions import IdempotencyKeyPrefixNotGrantedError

GRANTED_KEY_PREFIXES_ENV = "IDEMPOTENT_LAMBDA_GRANTED_KEY_PREFIXES"
"""The environment variable naming the key prefixes the construct granted, comma-separated."""

LARGE_RESULTS_ROOT = "idempotency/"
"""The folder of every function's offloaded results (the construct's bucket expires it)."""


def large_result_prefix(key_prefix: str) -> str:
    """Return where a function of `key_prefix` offloads: `idempotency/<key_prefix>/`.

    The construct grants S3 under this prefix only, and the DynamoDB store offloads under it
    when given no `large_result_prefix` and a key prefix is known.
    """
    return f"{LARGE_RESULTS_ROOT}{key_prefix}/"


def check_granted(key_prefix: str) -> None:
    """Refuse a key prefix the construct did not grant this function.

    Raises:
        IdempotencyKeyPrefixNotGrantedError: `GRANTED_KEY_PREFIXES_ENV` is set and does not
            name `key_prefix`.
    """
    granted = os.environ.get(GRANTED_KEY_PREFIXES_ENV)
    if not granted:
        return
    prefixes = [p for p in granted.split(",") if p]
    if key_prefix not in prefixes:
        raise IdempotencyKeyPrefixNotGrantedError(key_prefix, prefixes)
