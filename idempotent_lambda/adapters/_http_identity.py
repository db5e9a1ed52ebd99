"""Turn one proxy event into the identity of its invocation: key scope and fingerprint, or a 400.

The stored key's material is ``{"method", "api", "stage", "route", "caller", "key"}``, so the
same key sent by two callers, or to two routes, methods, APIs or stages, names different records
(see `idempotent_lambda.adapters._http_caller` for the caller). The fingerprint (the validation
hash) covers method, path, raw query, ``Content-Type`` and body, unless
``payload_validation_jmespath`` replaces it. Requests whose method the adapter does not cover,
requests without a key when keys are optional, and every request while ``IDEMPOTENCY_DISABLED``
is set get no identity: the handler runs without a record.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
from collections.abc import Callable, Collection, Mapping
from typing import Any

from idempotent_lambda._engine import Derive
from idempotent_lambda._identity import Invocation, build_invocation, default_prefix, is_missing
from idempotent_lambda._lambda_context import LambdaContextLike
from idempotent_lambda.adapters._http_caller import CallerPolicy, CallerUnknownError
from idempotent_lambda.adapters._http_event import (
    Family,
    HttpRequest,
    InvalidKeyError,
    MalformedEventError,
    family_of,
    method_of,
    parse_request,
    read_key,
)
from idempotent_lambda.adapters._http_response import (
    IDEMPOTENCY_PROBLEM_TYPE,
    log_answer,
    log_unknown_caller,
    problem,
)
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import IdempotencyConfigError, IdempotencyKeyError
from idempotent_lambda.persistence.protocol import PersistenceStore

#: RFC 9110's safe methods: they change nothing, so there is nothing to deduplicate. ``OPTIONS``
#: is also what a browser's CORS preflight sends, without the key header.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})

_TOKEN_CHARS = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


class RejectedError(Exception):
    """Answer the request with this response without running the handler."""

    def __init__(self, response: dict[str, Any]) -> None:
        super().__init__(response["statusCode"])
        self.response = response


def check_header_name(header_name: object) -> None:
    """Raise `IdempotencyConfigError` unless ``header_name`` is a valid HTTP header name."""
    if not isinstance(header_name, str) or not header_name or set(header_name) - _TOKEN_CHARS:
        raise IdempotencyConfigError("header_name must be a valid HTTP header name")


def method_filter(methods: Collection[str] | None) -> Callable[[str], bool]:
    """Return the test of whether a request method is covered by the adapter.

    Args:
        methods: The covered methods, in any case; None covers every method but the safe ones.

    Raises:
        IdempotencyConfigError: ``methods`` is not a non-empty collection of method names.
    """
    if methods is None:
        return lambda method: method not in SAFE_METHODS
    if isinstance(methods, str) or not isinstance(methods, Collection):
        raise IdempotencyConfigError(
            'methods must be a collection of HTTP method names, e.g. ("POST", "PATCH")'
        )
    covered = set()
    for method in methods:
        if not isinstance(method, str) or not method or set(method) - _TOKEN_CHARS:
            raise IdempotencyConfigError(f"methods holds an invalid HTTP method: {method!r}")
        covered.add(method.upper())
    if not covered:
        raise IdempotencyConfigError("methods must name at least one HTTP method")
    frozen = frozenset(covered)
    return frozen.__contains__


class IdentityReader:
    """Reads what identifies a request, for one decorated handler."""

    def __init__(
        self,
        *,
        store: PersistenceStore,
        config: IdempotencyConfig,
        function_name: str,
        header_name: str,
        require_key: bool,
        covers: Callable[[str], bool],
        key_prefix: str | None,
        function: Callable[..., Any],
        callers: CallerPolicy,
    ) -> None:
        self.store = store
        self.config = config
        self.function_name = function_name
        self.header_name = header_name
        self.header = header_name.lower()
        self.require_key = require_key
        self.covers = covers
        self.key_prefix = key_prefix
        self.function = function
        self.callers = callers

    def deriver(self, event: Any) -> Derive | None:
        """Return how to derive ``event``'s invocation; None when its method is not covered.

        A request whose method the adapter does not cover runs as if it were not decorated:
        that is not an idempotency decision, so nothing is logged.
        """
        method = method_of(event)
        if method is not None and not self.covers(method):
            return None
        return functools.partial(self.read, event)

    def read(self, event: Any, lease: LambdaContextLike | None) -> Invocation | None:
        """Return the invocation; None to run the handler unrecorded (no key, keys optional).

        ``lease`` is the Lambda context whose remaining time is the lease.

        Raises:
            RejectedError: The request is answered with a 400 problem, or with a 500 when it is
                authenticated but its caller cannot be told (fail closed).
        """
        family = family_of(event)
        try:
            request = parse_request(event, self.header)
            key = read_key(request.key_values)
        except MalformedEventError as exc:
            raise self._reject(
                family, "malformed-event", "Malformed request", str(exc), problem_type="about:blank"
            ) from None
        except InvalidKeyError as exc:
            raise self._reject(
                family, "invalid-key", f"{self.header_name} is invalid", str(exc)
            ) from None
        config = self.config
        view = None
        if (key is None and config.event_key_jmespath) or config.payload_validation_jmespath:
            view = _event_view(event, request.body)  # the body is parsed once, for both
        material: Any = key
        if key is None and config.event_key_jmespath:
            material = self._extract(config.key_material, view, family)
        if is_missing(material):
            if self.require_key:
                raise self._reject(
                    family,
                    "missing-key",
                    f"{self.header_name} is missing",
                    f"This operation is idempotent and requires an {self.header_name} header.",
                )
            return None
        if config.payload_validation_jmespath:
            validated = self._extract(config.validation_material, view, family)
        else:
            validated = self._fingerprint(request)
        caller = self._caller(event, family)
        try:
            invocation = build_invocation(
                config,
                material={
                    "method": request.method,
                    "api": request.api,
                    "stage": request.stage,
                    "route": request.route,
                    "caller": None if caller is None else list(caller),
                    "key": material,
                },
                validated=validated,
                prefix=self.key_prefix or default_prefix(self.function),  # reads the env now
                now_ms=self.store.clock.now_ms(),
                context=lease,
            )
        except IdempotencyKeyError:
            raise self._reject(
                family,
                "unhashable-key",
                "Unusable idempotency key",
                "The idempotency key or the validated part of the request cannot be hashed.",
            ) from None
        assert invocation is not None  # the material is a non-empty dict
        return invocation

    def _caller(self, event: Any, family: Family) -> tuple[str, ...] | None:
        try:
            return self.callers.derive(event)
        except MalformedEventError as exc:
            raise self._reject(
                family, "malformed-event", "Malformed request", str(exc), problem_type="about:blank"
            ) from None
        except CallerUnknownError as exc:
            log_unknown_caller(self.config.logger, self.function_name, exc.field)
            raise RejectedError(
                problem(
                    family,
                    500,
                    "Internal Server Error",
                    "The request is authenticated but its caller could not be identified; "
                    "it was not processed.",
                )
            ) from None

    def _fingerprint(self, request: HttpRequest) -> dict[str, Any]:
        body = request.body if isinstance(request.body, bytes) else _utf8(request.body)
        return {
            "method": request.method,
            "path": request.path,
            "query": [[name, list(values)] for name, values in request.query],
            "content_type": list(request.content_type),
            "body": hashlib.new(self.config.hash_name, body).hexdigest(),
        }

    def _extract(self, extract: Callable[[Any], Any], view: Any, family: Family) -> Any:
        try:
            return extract(view)
        except IdempotencyKeyError as exc:
            raise self._reject(
                family,
                "expression-failed",
                "Unreadable request",
                str(exc),
                problem_type="about:blank",
            ) from None

    def _reject(
        self,
        family: Family,
        reason: str,
        title: str,
        detail: str,
        *,
        problem_type: str = IDEMPOTENCY_PROBLEM_TYPE,
    ) -> RejectedError:
        log_answer(self.config.logger, self.function_name, 400, reason, outcome="REJECTED")
        return RejectedError(problem(family, 400, title, detail, problem_type=problem_type))


def _event_view(event: Mapping[str, Any], body: str | bytes) -> dict[str, Any]:
    """Return the event as expressions see it: a shallow copy with the body parsed as JSON.

    ``body`` is the request body, base64-decoded already when ``isBase64Encoded``. A body that is
    not JSON (or not UTF-8) is left as the event carried it, so ``powertools_json(body)`` fails
    on it as it would in Powertools.
    """
    view = dict(event)
    with contextlib.suppress(ValueError, RecursionError):  # not UTF-8, not JSON, too deep
        view["body"] = json.loads(body.decode("utf-8") if isinstance(body, bytes) else body)
    return view


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")
