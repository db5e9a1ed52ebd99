"""Where the stores meet botocore: lazily built clients, and the one translation of its errors.

Both AWS services the stores use (DynamoDB for records, S3 for large results) go through here,
so the client defaults and the error mapping exist once. boto3 is imported only when a client is
first built, never at import time.

Errors: `translate_errors` is the single boundary. Any botocore/boto3 failure raised inside it
(throttling, missing table or bucket, timeouts, connection errors) becomes
`IdempotencyPersistenceLayerError` naming the service, the operation and the error code, with the
original as ``__cause__``. A client that cannot work as configured (no region, no credentials,
an endpoint URL that is not one) is `IdempotencyPersistenceConfigError` instead, naming the fix,
whether it shows when `LazyClient` builds the client or at the request. Our own errors and
everything else pass through unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from idempotent_lambda.exceptions import (
    IdempotencyError,
    IdempotencyPersistenceConfigError,
    IdempotencyPersistenceLayerError,
    IdempotencyWriteConflictError,
)

if TYPE_CHECKING:
    import boto3
    from botocore.config import Config

ClientT = TypeVar("ClientT")

#: How the messages name each service.
SERVICE_NAMES: Mapping[str, str] = {"dynamodb": "DynamoDB", "s3": "S3", "events": "EventBridge"}

#: Bounded retries and timeouts that fit inside a Lambda invocation.
_COMMON: Mapping[str, Any] = {
    "retries": {"total_max_attempts": 3, "mode": "standard"},
    "connect_timeout": 2,
    "tcp_keepalive": True,
}
#: Connection pool of the default clients (botocore's own default is 10): a batch handler with its
#: default ``max_concurrency`` of 64 has up to 64 lanes and 64 store calls ahead or behind in
#: flight, so no call waits for a connection, nor opens one the pool then throws away.
MAX_POOL_CONNECTIONS = 128
DYNAMODB_DEFAULTS: Mapping[str, Any] = {
    **_COMMON,
    "read_timeout": 3,
    "max_pool_connections": MAX_POOL_CONNECTIONS,
}
#: S3 bodies are up to ~400 KB: a longer read timeout than DynamoDB's.
S3_DEFAULTS: Mapping[str, Any] = {
    **_COMMON,
    "read_timeout": 10,
    "max_pool_connections": MAX_POOL_CONNECTIONS,
}


def build_client(
    service: str,
    session: boto3.session.Session | None,
    user_config: Config | None,
    defaults: Mapping[str, Any],
) -> Any:
    """Build a ``service`` client with ``defaults``, ``user_config`` merged over them.

    No endpoint is forced, so ``AWS_ENDPOINT_URL_DYNAMODB`` / ``AWS_ENDPOINT_URL_S3`` (and
    ``AWS_ENDPOINT_URL``) are honoured by botocore itself.
    """
    import boto3.session
    from botocore.config import Config

    config = Config(**defaults)
    if user_config is not None:
        config = config.merge(user_config)
    return (session or boto3.session.Session()).client(service, config=config)  # type: ignore[call-overload]


class LazyClient(Generic[ClientT]):
    """A boto3 client built on first use (never at construction), once, thread-safely.

    Cold starts that never reach the store pay nothing for boto3.

    Args:
        service: ``"dynamodb"`` or ``"s3"``.
        client: A ready client, used as-is; None to build one.
        session: Session to build the client from (default: a new session).
        boto_config: botocore ``Config`` merged over ``defaults``.
        defaults: The client options of this service.
    """

    def __init__(
        self,
        service: str,
        *,
        client: ClientT | None,
        session: boto3.session.Session | None,
        boto_config: Config | None,
        defaults: Mapping[str, Any],
    ) -> None:
        self.service = service
        self._client = client
        self._session = session
        self._boto_config = boto_config
        self._defaults = defaults
        self._lock = threading.Lock()

    @property
    def built(self) -> bool:
        """Tell whether the client exists yet (given, or built by an earlier `get`)."""
        return self._client is not None

    def get(self) -> ClientT:
        """Return the client, building it on the first call.

        Raises:
            IdempotencyPersistenceConfigError: The client cannot be built as configured.
        """
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._build()
                client = self._client
        return client

    def set(self, client: ClientT) -> None:
        """Replace the client for every later request (a test's stub or a local endpoint)."""
        with self._lock:
            self._client = client

    def _build(self) -> ClientT:
        service = SERVICE_NAMES.get(self.service, self.service)
        try:
            client: ClientT = build_client(
                self.service, self._session, self._boto_config, self._defaults
            )
        except Exception as exc:
            error = config_error(f"{service} client", exc)
            if error is None and str(exc).startswith("Invalid endpoint"):  # botocore's ValueError
                variable = f"AWS_ENDPOINT_URL_{self.service.upper()}"
                error = IdempotencyPersistenceConfigError(
                    f"{service} client: the endpoint URL is not a URL; set {variable} (or"
                    " AWS_ENDPOINT_URL) to one such as http://127.0.0.1:8000, or unset it"
                )
            if error is None:
                raise
            raise error from exc
        return client


def request_bound_ms(client: Any) -> int:
    """Return the longest one request of ``client`` may take, botocore's retries included.

    Each attempt may wait its connect and read timeouts (botocore's defaults, 60 s each, when
    the client's settings leave them out); before each retry botocore backs off at most
    ``2 ** n`` seconds, 20 s at most, in its legacy and standard modes alike.
    """
    config = client.meta.config
    connect = config.connect_timeout if config.connect_timeout is not None else 60
    read = config.read_timeout if config.read_timeout is not None else 60
    retries = config.retries or {}
    attempts = retries.get("total_max_attempts")
    if attempts is None and retries.get("max_attempts") is not None:
        attempts = retries["max_attempts"] + 1
    if attempts is None:
        attempts = 5 if retries.get("mode", "legacy") == "legacy" else 3
    backoff = sum(min(2**n, 20) for n in range(attempts - 1))
    return int((attempts * (connect + read) + backoff) * 1000)


def error_code(exc: BaseException) -> str | None:
    """Return the error code of a botocore/boto3 exception; None for any other exception."""
    try:
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:  # pragma: no cover - boto3 is a dependency
        return None
    if isinstance(exc, ClientError):
        return exc.response.get("Error", {}).get("Code") or type(exc).__name__
    if isinstance(exc, (BotoCoreError, Boto3Error)):
        return type(exc).__name__
    return None


def config_error(what: str, exc: BaseException) -> IdempotencyPersistenceConfigError | None:
    """Return the configuration error that botocore's ``exc`` means, naming the fix; None when
    ``exc`` is not one. ``what`` failed, for the message (``"DynamoDB GetItem"``)."""
    try:
        from botocore import exceptions as boto
    except ImportError:  # pragma: no cover - boto3 is a dependency
        return None
    if isinstance(exc, boto.NoRegionError):
        fix = (
            "no AWS region is configured; set AWS_DEFAULT_REGION (Lambda sets it), or pass"
            " boto_config=Config(region_name=...)"
        )
    elif isinstance(exc, boto.InvalidRegionError):
        fix = (
            "the AWS region is not a region name; set AWS_DEFAULT_REGION or"
            " boto_config=Config(region_name=...) to one such as us-east-1"
        )
    elif isinstance(exc, (boto.NoCredentialsError, boto.PartialCredentialsError)):
        fix = (
            f"no complete AWS credentials ({exc}); give the function an execution role, set"
            " AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or AWS_PROFILE, or pass boto3_session"
        )
    elif isinstance(exc, boto.ProfileNotFound):
        fix = f"{exc}; set AWS_PROFILE to a profile of the AWS config files, or unset it"
    else:
        return None
    return IdempotencyPersistenceConfigError(f"{what}: {fix}")


@contextmanager
def translate_errors(service: str, operation: str) -> Iterator[None]:
    """Turn a botocore error raised inside into `IdempotencyPersistenceLayerError`.

    A configuration error becomes `IdempotencyPersistenceConfigError` (`config_error`).

    Args:
        service: What failed, for the message (``"DynamoDB"``, ``"S3"``).
        operation: The API operation, for the message (``"PutItem"``).
    """
    try:
        yield
    except IdempotencyError:
        raise
    except Exception as exc:
        code = error_code(exc)
        if code is None:
            raise
        error = config_error(f"{service} {operation}", exc)
        if error is not None:
            raise error from exc
        if code == "ReplicatedWriteConflictException":
            raise IdempotencyWriteConflictError(
                f"{service} {operation} met a write of the same item in another Region: {code}"
            ) from exc
        raise IdempotencyPersistenceLayerError(f"{service} {operation} failed: {code}") from exc
