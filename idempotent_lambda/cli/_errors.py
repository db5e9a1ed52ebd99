"""The CLI's one error boundary: any failure becomes one line on stderr and an exit code."""

from __future__ import annotations

from idempotent_lambda.exceptions import IdempotencyError

#: Exit codes.
OK, NOT_FOUND, ERROR, INTERRUPTED = 0, 1, 2, 130

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


class CliError(Exception):
    """A failure to report as one line, with its exit code."""

    def __init__(self, message: str, exit_code: int = ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def explain(exc: BaseException, *, table: str | None, endpoint: str | None) -> str | None:
    """Return a one-line explanation of a boto3/botocore or library error; None for others."""
    from botocore import exceptions as bce

    where = endpoint or "AWS"
    if isinstance(exc, bce.ClientError):
        error = exc.response.get("Error", {})
        code, message = error.get("Code", "Unknown"), error.get("Message", "")
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


def one_line(text: str) -> str:
    """Collapse ``text`` to a single line."""
    return " ".join(text.split())
