"""Where the stores meet botocore: lazily built clients, and the one translation of its errors.

Both AWS services the stores use (DynamoDB for records, S3 for large results) go through here,
so the client defaults and the error mapping exist once. boto3 is imported only when a client is
first built, never at import time.

Errors: `translate_errors` is the single boundary. Any botocore/boto3 failure raised inside it
(throttling, missing table or bucket, timeouts, connection errors) becomes
`IdempotencyPersistenceLayerError` naming the service, the operation and the error code, with the
original as ``__cause__`` and the code as its ``error_code``. A client that cannot work as
configured (no region, no credentials, an endpoint URL that is not one) is
`IdempotencyPersistenceConfigError` instead, naming the fix, whether it shows when `LazyClient`
builds the client or at the request. Our own errors and
everything else pass through unchanged. No module outside this one reads botocore's
``response["Error"]``: inside a `translate_errors` block they ask `error_details`
(`tests/unit/test_botocore_boundary.py` holds them to it).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from idempotent_lambda._observability import requests_of_context
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
#: Figures taken where botocore's own are not found: at least what any of its versions does.
_STANDARD_ATTEMPTS_FALLBACK = 4
_MAX_BACKOFF_FALLBACK_S = 20
_RETRY_AFTER_FALLBACK_S = 5
_LEGACY_ATTEMPTS_FALLBACK = 10
DYNAMODB_DEFAULTS: Mapping[str, Any] = {
    **_COMMON,
    "read_timeout": 3,
    "max_pool_connections": MAX_POOL_CONNECTIONS,
}
#: The client of a store's unconditional grouped writes, when the store builds its clients: one
#: attempt (the batch retries unprocessed items itself, and writes conditionally after a failed
#: request), so the longest such request is its connect and read timeouts (5 s by default).
GROUPED_WRITES: Mapping[str, Any] = {"retries": {"total_max_attempts": 1, "mode": "standard"}}
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
    overrides: Mapping[str, Any] | None = None,
) -> Any:
    """Build a ``service`` client with ``defaults``, ``user_config`` merged over them, and
    ``overrides`` over both.

    No endpoint is forced, so ``AWS_ENDPOINT_URL_DYNAMODB`` / ``AWS_ENDPOINT_URL_S3`` (and
    ``AWS_ENDPOINT_URL``) are honoured by botocore itself.
    """
    import boto3.session
    from botocore.config import Config

    config = Config(**defaults)
    if user_config is not None:
        config = config.merge(user_config)
    if overrides:
        config = config.merge(Config(**overrides))
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
        overrides: Options merged over ``boto_config`` (`GROUPED_WRITES`).
    """

    def __init__(
        self,
        service: str,
        *,
        client: ClientT | None,
        session: boto3.session.Session | None,
        boto_config: Config | None,
        defaults: Mapping[str, Any],
        overrides: Mapping[str, Any] | None = None,
    ) -> None:
        self.service = service
        self._client = client
        self._overrides = overrides
        self.own = False  # True once the client in use is the one this object built
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
                    self.own = True
                client = self._client
        return client

    def set(self, client: ClientT) -> None:
        """Replace the client for every later request (a test's stub or a local endpoint)."""
        with self._lock:
            self._client = client
            self.own = False

    def _build(self) -> ClientT:
        service = SERVICE_NAMES.get(self.service, self.service)
        try:
            client: ClientT = build_client(
                self.service, self._session, self._boto_config, self._defaults, self._overrides
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


def request_bound_ms(client: Any) -> int | None:
    """Return the longest one request of ``client`` may take, botocore's retries included.

    Read from what the installed botocore does for this client (its resolved retry mode and
    attempts, so ``Config``, ``AWS_RETRY_MODE`` and ``AWS_MAX_ATTEMPTS`` all count): each
    attempt may wait its connect and read timeouts (60 s each when unset), and each retry its
    longest backoff. None for adaptive mode, whose rate limiter may block without limit, and for
    a mode this function does not know.
    """
    config = client.meta.config
    connect = config.connect_timeout if config.connect_timeout is not None else 60
    read = config.read_timeout if config.read_timeout is not None else 60
    retries = config.retries or {}
    attempts = retries.get("total_max_attempts")
    if attempts is None and retries.get("max_attempts") is not None:
        attempts = retries["max_attempts"] + 1
    model = client.meta.service_model
    plan = _retry_plan(
        retries.get("mode") or "legacy",
        attempts,
        model.service_id.hyphenize(),
        model.endpoint_prefix,
    )
    if plan is None:
        return None
    count, backoff_s = plan
    return int((count * (connect + read) + backoff_s) * 1000)


@functools.lru_cache(maxsize=32)
def _retry_plan(
    mode: str, attempts: int | None, service: str, endpoint_prefix: str
) -> tuple[int, float] | None:
    """Return (attempts, the longest total of the backoffs between them) in retry ``mode``."""
    if mode == "standard":
        return _standard_plan(attempts, service)
    if mode == "legacy":
        return _legacy_plan(attempts, endpoint_prefix)
    return None  # adaptive: its token bucket may hold a request back without limit


def _standard_plan(attempts: int | None, service: str) -> tuple[int, float]:
    """Standard mode: truncated exponential backoff, each retry raised by ``x-amz-retry-after``.

    botocore keeps its per-service attempts and its caps in private names; where one is missing
    (another botocore version) the figure taken is at least what any version does.
    """
    from botocore.retries import standard

    if attempts is None:
        per_service = getattr(standard, "_SERVICE_MAX_ATTEMPTS", None)
        default = getattr(standard, "DEFAULT_MAX_ATTEMPTS", 3)
        if isinstance(per_service, Mapping):
            attempts = per_service.get(service, default)
        else:
            attempts = max(default, _STANDARD_ATTEMPTS_FALLBACK)
    backoff = standard.ExponentialBackoff
    cap = getattr(backoff, "_MAX_BACKOFF", _MAX_BACKOFF_FALLBACK_S)
    retry_after = getattr(backoff, "_RETRY_AFTER_MAX_ADDITIONAL", _RETRY_AFTER_FALLBACK_S)
    # Throttling errors back off from a 1 s base, the largest of botocore's bases.
    pauses = sum(min(2**n, cap) + retry_after for n in range(attempts - 1))
    return attempts, pauses


def _legacy_plan(attempts: int | None, endpoint_prefix: str) -> tuple[int, float]:
    """Legacy mode: the service's own policy in botocore's ``_retry`` data (DynamoDB: 10
    attempts, ``0.05 * 2 ** n`` s before retry ``n + 1``, no cap), attempts overridden by the
    client's settings."""
    from botocore.loaders import create_loader
    from botocore.translate import build_retry_config

    overrides = None if attempts is None else {"max_attempts": attempts - 1}
    try:
        model = create_loader().load_data("_retry")
        policy = build_retry_config(
            endpoint_prefix, model.get("retry", {}), model.get("definitions", {}), overrides
        )["__default__"]
        count = int(policy["max_attempts"])
        delay = policy["delay"]
        base = 1.0 if delay["base"] == "rand" else float(delay["base"])
        growth = float(delay["growth_factor"])
    except Exception:  # data of another shape: count as if every pause were its largest
        count = attempts or _LEGACY_ATTEMPTS_FALLBACK
        base, growth = 1.0, 2.0
    return count, sum(base * growth**n for n in range(count - 1))


def count_requests(client: Any) -> None:
    """Count every request ``client`` sends (each attempt) for the invocation that sends it.

    The count goes to the decision's ``store_requests`` (the ``StoreRequests`` metric). The
    hook is added once per client; it reads nothing of the request.
    """
    events = getattr(getattr(client, "meta", None), "events", None)
    if events is not None:  # a test's stand-in may have none
        events.register("before-send", _count_request, unique_id="idempotent_lambda.requests")


def _count_request(**_: Any) -> None:
    counter = requests_of_context.get()
    if counter is not None:
        counter.n += 1


def error_code(exc: BaseException) -> str | None:
    """Return the error code of a botocore/boto3 exception; None for any other exception."""
    try:
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:  # pragma: no cover - boto3 is a dependency
        return None
    if isinstance(exc, ClientError):
        return error_details(exc)[0] or type(exc).__name__
    if isinstance(exc, (BotoCoreError, Boto3Error)):
        return type(exc).__name__
    return None


def error_details(exc: BaseException) -> tuple[str | None, str]:
    """Return the code and message AWS answered with in ``exc``; ``(None, "")`` when it has none.

    Every other module asks here rather than reading botocore's ``response["Error"]`` itself.
    """
    response = getattr(exc, "response", None)
    error = response.get("Error") if isinstance(response, Mapping) else None
    if not isinstance(error, Mapping):
        return None, ""
    code = error.get("Code")
    return (str(code) if code else None), str(error.get("Message") or "")


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
                f"{service} {operation} met a write of the same item in another Region: {code}",
                error_code=code,
            ) from exc
        raise IdempotencyPersistenceLayerError(
            f"{service} {operation} failed: {code}", error_code=code
        ) from exc
