"""Find the key a decorated handler gives an event by running the event through its decorator.

The decorator or adapter runs on a throwaway `InMemoryPersistenceLayer`, around a stand-in body
that does nothing and carries the real handler's module and qualified name (the handler itself
never runs; `_keys` reads an imported handler's settings). The key is the one that decorator
claimed, with its record format, prefix and scope rules, so it cannot drift from them. No key is
returned, with the reason, where the key depends on a field the event lacks (an API Gateway
event without its `requestContext`, a batch record without its source) or where the adapter
answers the event without one.

`ADAPTERS` lists the decorators it can run, by the name ``--decorator`` takes. A batch
adapter's entry is its `BatchSource`, read from the adapters' registry (`BATCH_SOURCES`): how
its event holds records, and where it names their source, are what the adapter declares.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from idempotent_lambda import IdempotencyConfig, InMemoryPersistenceLayer
from idempotent_lambda.adapters._batch_source import BATCH_SOURCES, BatchSource, Probe
from idempotent_lambda.cli._output import CliError
from idempotent_lambda.record import IdempotencyRecord

#: Why an event (or a batch record) that has no key material gets none.
NO_KEY_MATERIAL = (
    "the key expression finds nothing in this event: the function runs without idempotency "
    "(or raises IdempotencyKeyError with raise_on_no_idempotency_key=True)"
)
_FUNCTION_NAME = "AWS_LAMBDA_FUNCTION_NAME"
_DISABLE = ("IDEMPOTENCY_DISABLED", "POWERTOOLS_IDEMPOTENCY_DISABLED")
_ANSWER: dict[str, Any] = {"statusCode": 200, "body": ""}  # the HTTP stand-in's response


@dataclass(frozen=True, slots=True)
class Adapter:
    """A decorator the `key` command can run.

    Attributes:
        module: The module that defines it.
        name: Its name, as `--decorator` takes it.
        batch: A batch adapter's event source (each record has its own key); None for others.
    """

    module: str
    name: str
    batch: BatchSource[Any] | None = None

    def load(self) -> Callable[..., Any] | None:
        """Return the decorator; None when this version of the library has none of that name."""
        try:
            found = getattr(importlib.import_module(self.module), self.name)
        except (ImportError, AttributeError):
            return None
        return cast(Callable[..., Any], found)


def _batch_entry(name: str) -> Adapter:
    module = f"idempotent_lambda.adapters.{name}"
    source: BatchSource[Any] = importlib.import_module(module).SOURCE
    return Adapter(module, source.decorator, source)


ADAPTERS = {
    adapter.name: adapter
    for adapter in (
        Adapter("idempotent_lambda", "idempotent"),
        Adapter("idempotent_lambda", "idempotent_function"),
        Adapter("idempotent_lambda.adapters.api_gateway", "idempotent_http"),
        *(_batch_entry(name) for name in BATCH_SOURCES),
    )
}


@dataclass(frozen=True, slots=True)
class Derived:
    """The key an event (or one batch record) gets, or why it gets none.

    Attributes:
        key: The full key; None when there is none.
        validation_hash: The validation hash stored with it, if any.
        reason: Why there is no key.
        refused: True when the key cannot be told (the adapter refuses the event, or the key
            depends on a field the event lacks); False when the function runs without one.
    """

    key: str | None
    validation_hash: str | None = None
    reason: str | None = None
    refused: bool = False


@dataclass(frozen=True, slots=True)
class _Run:
    """One dry run: what was claimed, what the handler answered, what the library warned."""

    claims: list[IdempotencyRecord]
    answer: Any
    warnings: list[str] = field(default_factory=list)

    @property
    def key(self) -> str | None:
        return self.claims[-1].idempotency_key if self.claims else None

    def derived(self) -> Derived:
        claim = self.claims[-1]
        return Derived(claim.idempotency_key, claim.payload_hash)


class DryRun:
    """Runs events through one decorator on a throwaway store.

    Args:
        decorator: A name of `ADAPTERS`.
        config: The function's config.
        key_prefix: The decorator's ``key_prefix``.
        handler: ``MODULE:QUALNAME`` of the decorated function (names its default prefix).
        function_name: The Lambda function's name (the default prefix starts with it).
        options: More keywords for the decorator (the HTTP adapter's).

    Raises:
        CliError: This installation has no such decorator, or ``handler`` is malformed.
    """

    def __init__(
        self,
        decorator: str,
        *,
        config: IdempotencyConfig,
        key_prefix: str | None,
        handler: str | None,
        function_name: str | None,
        options: Mapping[str, Any],
    ) -> None:
        self.adapter = ADAPTERS[decorator]
        found = self.adapter.load()
        if found is None:
            raise CliError(f"this installation has no {decorator}")
        self._decorate = functools.partial(found, config=config, key_prefix=key_prefix, **options)
        self._handler, self._function_name = handler, function_name
        _stand_in(handler, _handler)  # refuse a malformed --handler before anything runs

    def derive(self, event: Any) -> list[Derived]:
        """Return the key of ``event``, or of each of its records for a batch adapter.

        Raises:
            CliError: A batch adapter is given an event without records.
            IdempotencyError: The decorator raised it (a key expression that fails, say).
        """
        source = self.adapter.batch
        if source is not None:
            singles = source.one_by_one(event)
            if not singles:
                raise CliError(f"{self.adapter.name} takes a batch event: {source.event_shape}")
            return [self._record(source, alone, raw) for alone, raw in singles]
        found = self._run(event)
        if self.adapter.name == "idempotent_http":
            return [self._http(event, found)]
        return [found.derived() if found.claims else Derived(None, reason=NO_KEY_MATERIAL)]

    def _run(self, event: Any) -> _Run:
        """Run ``event`` through a freshly decorated stand-in, on a fresh store."""
        store = _ClaimLog()
        warnings: list[str] = []
        name = self.adapter.name
        with environment(self._function_name), _captured(warnings):
            if name == "idempotent_function":
                decorate = self._decorate(persistence_store=store, data_keyword_argument="payload")
                answer = decorate(_stand_in(self._handler, _function))(event)
            else:
                extra = {"max_concurrency": 1} if self.adapter.batch is not None else {}
                body = _http_handler if name == "idempotent_http" else _handler
                decorate = self._decorate(persistence_store=store, **extra)
                answer = decorate(_stand_in(self._handler, body))(event, None)
        return _Run(store.claims, answer, warnings)

    def _http(self, event: Any, found: _Run) -> Derived:
        if found.key is None:
            answer = found.answer if isinstance(found.answer, Mapping) else {}
            status = answer.get("statusCode")
            if status == _ANSWER["statusCode"]:
                return Derived(
                    None,
                    reason="the adapter does not cover this request's method: the handler runs "
                    "without idempotency (--methods names the methods the function covers)",
                )
            problem = _problem(answer.get("body"))
            hint = ""
            if status == 500:
                hint = (
                    " (a function that passes caller= or caller_scope='shared' to the adapter "
                    "is matched with --caller EXPR or --caller-scope shared)"
                )
            return Derived(
                None,
                reason=f"the adapter answers this event {status} without a key: "
                f"{problem.get('title')}: {problem.get('detail')}{hint}",
                refused=True,
            )
        lacking = self._depends_on_missing(event, found.key, _http_scope_fields(event))
        if lacking:
            return Derived(
                None,
                reason=f"the key includes {', '.join(lacking)}, which this event lacks: pass the "
                "event as the function receives it (API Gateway or the load balancer adds them)",
                refused=True,
            )
        return found.derived()

    def _record(self, source: BatchSource[Any], alone: dict[str, Any], raw: Any) -> Derived:
        """Return the key of ``raw``, the one record of the batch event ``alone``."""
        found = self._run(alone)
        if found.key is None:
            failed = isinstance(found.answer, Mapping) and found.answer.get("batchItemFailures")
            if not failed:
                return Derived(None, reason=NO_KEY_MATERIAL)
            why = _malformed(source, raw) or "; ".join(found.warnings)
            return Derived(None, reason=f"the adapter fails this record: {why}", refused=True)
        if self._depends_on_missing(alone, found.key, source.scope_probes(alone)):
            return Derived(
                None,
                reason=f"its key includes {source.scope_field}, which it lacks: pass the records "
                "as the function receives them",
                refused=True,
            )
        return found.derived()

    def _depends_on_missing(self, event: Any, key: str, fields: list[Probe]) -> list[str]:
        """Return the fields ``event`` lacks whose value would change its key.

        Each missing field is set to a stand-in value in a copy of the event; a changed key
        means the deployed function, which always receives that field, computes another key.
        """
        lacking = []
        for path, stand_in in fields:
            if _lookup(event, path) is not None:
                continue
            probe = copy.deepcopy(event)
            _assign(probe, path, stand_in)
            if self._run(probe).key != key:
                lacking.append(".".join(str(part) for part in path if not isinstance(part, int)))
        return lacking


class _ClaimLog(InMemoryPersistenceLayer):
    """A throwaway in-memory store that lists what was claimed."""

    def __init__(self) -> None:
        super().__init__()
        self.claims: list[IdempotencyRecord] = []

    def claim(self, record: IdempotencyRecord, *, now_ms: int, lease_cutoff_ms: int) -> Any:
        """Note ``record``, then claim it (see `PersistenceStore.claim`)."""
        self.claims.append(record)
        return super().claim(record, now_ms=now_ms, lease_cutoff_ms=lease_cutoff_ms)


def _malformed(source: BatchSource[Any], raw: Any) -> str | None:
    """Return what the source's typed record says is wrong with ``raw``, if anything."""
    if not isinstance(raw, Mapping):
        return None
    try:
        source.parse(raw)
    except ValueError as exc:  # MalformedRecordError, whose message is a fixed phrase
        return str(exc)
    return None


def _stand_in(handler: str | None, body: Callable[..., Any]) -> Callable[..., Any]:
    """Return a copy of ``body`` that carries the module and qualified name of ``handler``."""

    @functools.wraps(body)  # the decorators read its signature
    def stand_in(*args: Any, **kwargs: Any) -> Any:
        return body(*args, **kwargs)

    if handler is not None:
        module, _, qualname = handler.partition(":")
        if not module or not qualname:
            raise CliError("--handler takes MODULE:QUALNAME, e.g. app:lambda_handler")
        stand_in.__module__, stand_in.__qualname__ = module, qualname
    return stand_in


def _handler(event: Any, context: Any) -> None:
    return None


def _function(payload: Any) -> None:
    return None


def _http_handler(event: Any, context: Any) -> dict[str, Any]:
    return dict(_ANSWER)


def _problem(body: Any) -> dict[str, Any]:
    try:
        problem = json.loads(body)
    except (TypeError, ValueError):
        return {}
    return problem if isinstance(problem, dict) else {}


def _http_scope_fields(event: Any) -> list[Probe]:
    """Return the fields API Gateway or an ALB always sends that may scope a key."""
    if not isinstance(event, Mapping):
        return []
    context = event.get("requestContext")
    if isinstance(context, Mapping) and "elb" in context:
        arn = "arn:aws:elasticloadbalancing:us-east-1:000000000000:targetgroup/probe/0"
        return [(("requestContext", "elb", "targetGroupArn"), arn)]
    fields: list[Probe] = [(("requestContext", "stage"), "probe")]
    if not (isinstance(context, Mapping) and context.get("domainName")):
        fields.insert(0, (("requestContext", "apiId"), "probe"))
    route = ("routeKey",) if event.get("version") == "2.0" else ("resource",)
    fields.append((route, "/probe"))
    return fields


def _lookup(value: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        if isinstance(part, int):
            value = value[part] if isinstance(value, list) and len(value) > part else None
        else:
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is None:
            return None
    return value


def _assign(value: Any, path: tuple[str | int, ...], new: str) -> None:
    """Set ``path`` in ``value`` to ``new``, adding the objects on the way that are missing."""
    for part in path[:-1]:
        if isinstance(part, str) and value.get(part) is None:
            value[part] = {}
        value = value[part]
    value[path[-1]] = new


@contextlib.contextmanager
def environment(function_name: str | None) -> Iterator[None]:
    """Run with the Lambda function name given, and idempotency switched on."""
    before = {name: os.environ.get(name) for name in (_FUNCTION_NAME, *_DISABLE)}
    for name in _DISABLE:
        os.environ.pop(name, None)
    if function_name is not None:
        os.environ[_FUNCTION_NAME] = function_name
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class _Collect(logging.Handler):
    def __init__(self, messages: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.messages = messages

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _captured(messages: list[str]) -> Iterator[None]:
    """Keep the library's warnings in ``messages`` instead of printing them."""
    logger = logging.getLogger("idempotent_lambda")
    handler, propagate = _Collect(messages), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
