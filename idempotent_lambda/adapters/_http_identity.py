"""The invocation a proxy request stands for, and who sent it.

The key's material is `{"method", "api", "stage", "route", "caller", "key"}`; the fingerprint
(the validation hash) covers method, path, raw query, `Content-Type` and body, unless
`payload_validation_jmespath` replaces it. A stored response must never reach another caller:
the caller comes from fields the platform sets, those of the first setup whose authentication
context the event carries (an API method has one authorization type), under `requestContext`:

| setup | caller, first present of |
|---|---|
| REST API IAM (or Cognito identity pool) | `identity`: `cognitoIdentityId`, `userArn` |
| REST API Cognito user pool | `authorizer.claims`: `sub`, `client_id`, `azp` |
| REST API Lambda authorizer | `authorizer.principalId` |
| HTTP API, Function URL IAM | `authorizer.iam`: `cognitoIdentity.identityId`, `userArn`, `userId` |
| HTTP API JWT authorizer | `authorizer.jwt.claims`: `sub`, `client_id`, `azp` |
| HTTP API Lambda authorizer | none (its context is the authorizer's own): pass `caller=` |
| mutual TLS | `clientCert` in `authentication` (REST: `identity`): issuer, subject, serial |
| ALB authenticate-oidc / -cognito | the `x-amzn-oidc-identity` header, beside the ALB's others |
| REST API usage-plan key | `identity.apiKeyId` |

An authentication context from which no caller can be read raises `CallerUnknownError`: the
adapter fails closed rather than share one scope between callers.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping
from typing import Any

import jmespath
from jmespath.exceptions import JMESPathError

from idempotent_lambda._identity import Derive, Invocation, build_invocation, is_missing
from idempotent_lambda._lambda_context import LambdaContextLike
from idempotent_lambda.adapters._http_request import (
    HttpRequest,
    InvalidKeyError,
    event_view,
    method_of,
    parse_request,
    read_key,
)
from idempotent_lambda.adapters._http_response import (
    CallerUnknownError,
    RejectedError,
    malformed,
)
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import (
    IdempotencyConfigError,
    IdempotencyKeyError,
    MalformedEventError,
)
from idempotent_lambda.persistence.protocol import PersistenceStore

#: ``(source, part, ...)``: the source tags the id, so one string from two sources never matches.
Caller = tuple[str, ...]
CallerOption = str | Callable[[Any], "str | None"] | None

#: The values of ``caller_scope``.
CALLER_SCOPES = ("caller", "shared")

_JWT_CLAIMS = (("sub", "jwt"), ("client_id", "jwt-client"), ("azp", "jwt-azp"))
#: What API Gateway adds beside an authorizer's context: not a sign of an authenticated caller.
_NOT_IDENTITIES = frozenset({"integrationLatency"})
_OIDC_HEADERS = ("x-amzn-oidc-data", "x-amzn-oidc-accesstoken", "x-amzn-oidc-identity")


class IdentityReader:
    """Turns one proxy event into its invocation (see the module docstring), for one handler."""

    def __init__(
        self,
        *,
        store: PersistenceStore,
        config: IdempotencyConfig,
        header_name: str,
        require_key: bool,
        covers: Callable[[str], bool],
        prefix: Callable[[], str],
        callers: CallerPolicy,
    ) -> None:
        self.clock = store.clock
        self.config = config
        self.header_name = header_name
        self.header = header_name.lower()
        self.require_key = require_key
        self.covers = covers
        self.prefix = prefix
        self.callers = callers

    def deriver(self, event: Any) -> Derive | None:
        """Return how to derive ``event``'s invocation; None when its method is not covered.

        Such a request runs as if the handler were not decorated: nothing is logged.
        """
        method = method_of(event)
        if method is not None and not self.covers(method):
            return None
        return functools.partial(self.read, event)

    def read(self, event: Any, lease: LambdaContextLike | None) -> Invocation | None:
        """Return the invocation; None to run unrecorded (no key, keys optional).

        Raises:
            RejectedError: The request is answered with a problem instead.
        """
        try:
            request = parse_request(event, self.header)
            key = read_key(request.key_values)
        except MalformedEventError as exc:
            raise malformed(str(exc)) from None
        except InvalidKeyError as exc:
            raise RejectedError(
                400, "invalid-key", f"{self.header_name} is invalid", str(exc)
            ) from None
        config = self.config
        view = None
        if (key is None and config.event_key_jmespath) or config.payload_validation_jmespath:
            view = event_view(event, request.body)  # the body is parsed once, for both
        material: Any = key
        if key is None and config.event_key_jmespath:
            material = _extract(config.key_material, view)
        if is_missing(material):
            if self.require_key:
                raise RejectedError(
                    400,
                    "missing-key",
                    f"{self.header_name} is missing",
                    f"This operation is idempotent and requires an {self.header_name} header.",
                )
            return None
        if config.payload_validation_jmespath:
            validated = _extract(config.validation_material, view)
        else:
            validated = self._fingerprint(request)
        caller = self._caller(event)
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
                prefix=self.prefix(),
                now_ms=self.clock.now_ms(),
                context=lease,
            )
        except IdempotencyKeyError:
            raise RejectedError(
                400,
                "unhashable-key",
                "Unusable idempotency key",
                "The idempotency key or the validated part of the request cannot be hashed.",
            ) from None
        assert invocation is not None  # the material is a non-empty dict
        return invocation

    def _caller(self, event: Any) -> tuple[str, ...] | None:
        try:
            return self.callers.derive(event)
        except MalformedEventError as exc:
            raise malformed(str(exc)) from None
        except CallerUnknownError as exc:
            raise RejectedError(
                500,
                "unknown-caller",
                "Internal Server Error",
                "The request is authenticated but its caller could not be identified; "
                "it was not processed.",
                problem_type="about:blank",
                field=exc.field,
            ) from None

    def _fingerprint(self, request: HttpRequest) -> dict[str, Any]:
        body = request.body
        if isinstance(body, str):
            body = body.encode("utf-8", "surrogatepass")
        return {
            "method": request.method,
            "path": request.path,
            "query": [[name, list(values)] for name, values in request.query],
            "content_type": list(request.content_type),
            "body": hashlib.new(self.config.hash_name, body).hexdigest(),
        }


class CallerPolicy:
    """Derive the caller part of a request's scope, as ``idempotent_http`` was told to.

    ``caller`` and ``caller_scope`` are `idempotent_http`'s; an unusable one raises
    `IdempotencyConfigError`.
    """

    def __init__(self, caller: CallerOption, caller_scope: str) -> None:
        if caller_scope not in CALLER_SCOPES:
            raise IdempotencyConfigError('caller_scope must be "caller" or "shared"')
        if caller_scope == "shared" and caller is not None:
            raise IdempotencyConfigError('caller= has no effect with caller_scope="shared"')
        self.shared = caller_scope == "shared"
        self._custom: Callable[[Any], Any] | None = None
        if isinstance(caller, str):
            try:
                self._custom = jmespath.compile(caller).search
            except JMESPathError as exc:
                raise IdempotencyConfigError(
                    f"caller is not a valid JMESPath expression: {exc}"
                ) from None
        elif callable(caller):
            self._custom = caller
        elif caller is not None:
            raise IdempotencyConfigError(
                "caller must be a JMESPath expression or a callable taking the event"
            )

    def derive(self, event: Mapping[str, Any]) -> Caller | None:
        """Return the caller of ``event``; None when the request is not authenticated.

        Raises:
            CallerUnknownError: Authenticated, but no caller can be read.
            MalformedEventError: A field the platform sets has the wrong type.
        """
        if self.shared:
            return None
        if self._custom is not None:
            try:
                found = self._custom(event)
            except Exception as exc:  # the user's callable or expression: fail closed
                raise CallerUnknownError(f"caller= (it raised {type(exc).__name__})") from None
            if isinstance(found, str) and found:
                return ("custom", found)
            if isinstance(found, int) and not isinstance(found, bool):
                return ("custom", str(found))
            if found not in (None, ""):
                raise CallerUnknownError(f"caller= (it returned a {type(found).__name__})")
        return platform_caller(event)


def platform_caller(event: Mapping[str, Any]) -> Caller | None:
    """Return the caller from the fields the platform sets; None when not authenticated.

    Raises:
        CallerUnknownError: An authentication context is present, but no caller in it.
        MalformedEventError: A field the platform sets has the wrong type.
    """
    context = event.get("requestContext")
    if not isinstance(context, Mapping):
        return None
    if "elb" in context:
        return _alb_caller(event)
    identity = _mapping(context, "identity")
    authorizer = _mapping(context, "authorizer")
    for derive in (_iam_v1, _iam_v2, _jwt, _lambda_authorizer, _client_cert):
        caller = derive(context, identity, authorizer)
        if caller is not None:
            return caller
    api_key = _text(identity, "apiKeyId", "requestContext.identity.apiKeyId")
    return None if api_key is None else ("api-key", api_key)


def _iam_v1(context: Any, identity: Mapping[str, Any], authorizer: Any) -> Caller | None:
    """REST API ``AWS_IAM``: identity pool id first (its users share one role ARN)."""
    where = "requestContext.identity"
    cognito = _text(identity, "cognitoIdentityId", f"{where}.cognitoIdentityId")
    if cognito is not None:
        return ("cognito-identity", cognito)
    arn = _text(identity, "userArn", f"{where}.userArn")
    if arn is not None:
        return ("iam", arn)
    signed = any(_text(identity, name, where) for name in ("accessKey", "caller", "user"))
    if signed:
        raise CallerUnknownError(f"{where}.userArn")
    return None


def _iam_v2(context: Any, identity: Any, authorizer: Mapping[str, Any]) -> Caller | None:
    """HTTP API / Function URL ``AWS_IAM``: identity pool id, role or user ARN, user id."""
    if not isinstance(authorizer.get("iam"), Mapping):
        return None
    where = "requestContext.authorizer.iam"
    iam = _mapping(authorizer, "iam")
    cognito = _mapping(iam, "cognitoIdentity")
    found = _text(cognito, "identityId", f"{where}.cognitoIdentity.identityId")
    if found is not None:
        return ("cognito-identity", found)
    for name, source in (("userArn", "iam"), ("userId", "iam-user-id")):
        found = _text(iam, name, f"{where}.{name}")
        if found is not None:
            return (source, found)
    raise CallerUnknownError(f"{where}.userArn")


def _jwt(context: Any, identity: Any, authorizer: Mapping[str, Any]) -> Caller | None:
    """Cognito user pool (REST ``claims``) and JWT authorizers (``jwt.claims``)."""
    if isinstance(authorizer.get("claims"), Mapping):
        where, claims = "requestContext.authorizer.claims", _mapping(authorizer, "claims")
    elif isinstance(authorizer.get("jwt"), Mapping):
        where = "requestContext.authorizer.jwt.claims"
        claims = _mapping(_mapping(authorizer, "jwt"), "claims")
    else:
        return None
    for claim, source in _JWT_CLAIMS:
        found = _text(claims, claim, f"{where}.{claim}")
        if found is not None:
            return (source, found)
    raise CallerUnknownError(f"{where}.sub")


def _lambda_authorizer(context: Any, identity: Any, authorizer: Mapping[str, Any]) -> Caller | None:
    """Lambda authorizers: REST API ones name a ``principalId``; HTTP API ones name nobody."""
    principal = _text(authorizer, "principalId", "requestContext.authorizer.principalId")
    if principal is not None:
        return ("principal", principal)
    if "lambda" in authorizer:
        raise CallerUnknownError("requestContext.authorizer.lambda")
    named = (v for k, v in authorizer.items() if k not in _NOT_IDENTITIES)
    if any(value not in (None, "") for value in named):
        raise CallerUnknownError("requestContext.authorizer.principalId")
    return None


def _client_cert(context: Any, identity: Mapping[str, Any], authorizer: Any) -> Caller | None:
    """Mutual TLS: the certificate's issuer, subject and serial number."""
    holders = (("authentication", _mapping(context, "authentication")), ("identity", identity))
    for parent, holder in holders:
        if holder.get("clientCert") is None:
            continue
        where = f"requestContext.{parent}.clientCert"
        cert = _mapping(holder, "clientCert")
        subject = _text(cert, "subjectDN", f"{where}.subjectDN")
        serial = _text(cert, "serialNumber", f"{where}.serialNumber")
        if subject is None or serial is None:
            missing = "subjectDN" if subject is None else "serialNumber"
            raise CallerUnknownError(f"{where}.{missing}")
        issuer = _text(cert, "issuerDN", f"{where}.issuerDN") or ""
        return ("client-cert", issuer, subject, serial)
    return None


def _alb_caller(event: Mapping[str, Any]) -> Caller | None:
    """ALB authenticate-oidc / authenticate-cognito: the ``x-amzn-oidc-identity`` header."""
    values: dict[str, set[str]] = {name: set() for name in _OIDC_HEADERS}
    for field in ("headers", "multiValueHeaders"):
        headers = event.get(field)
        if not isinstance(headers, Mapping):
            continue
        for name, value in headers.items():
            lowered = name.lower() if isinstance(name, str) else None
            if lowered in values:
                for item in value if isinstance(value, list) else [value]:
                    if isinstance(item, str) and item:
                        values[lowered].add(item)
    identity = values["x-amzn-oidc-identity"]
    if len(identity) == 1:
        return ("oidc", next(iter(identity)))
    if identity or any(values.values()):  # repeated, or the ALB's other headers without it
        raise CallerUnknownError("the x-amzn-oidc-identity header")
    return None


def _mapping(parent: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = parent.get(name)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise MalformedEventError(f"an identity field of requestContext ({name}) is not an object")
    return value


def _text(parent: Mapping[str, Any], name: str, where: str) -> str | None:
    """Return the non-empty string (or integer) at ``name``; None when absent or empty."""
    value = parent.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise MalformedEventError(f"a caller identity in requestContext is not a string: {where}")
    return str(value)


def _extract(extract: Callable[[Any], Any], view: Any) -> Any:
    try:
        return extract(view)
    except IdempotencyKeyError as exc:
        raise RejectedError(
            400, "expression-failed", "Unreadable request", str(exc), problem_type="about:blank"
        ) from None
