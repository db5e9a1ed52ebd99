"""What one batch event source declares, and how a record's key material is built from it.

A record's key material is, by default, `{"source": <its source>, "key": <its key>}`: the key
is the source's default key (`BatchSource.default_key`), or `event_key_jmespath` evaluated on
the raw record; the source is what `BatchSource.scope` reads (the queue, stream or cluster).
Two sources consumed by one function therefore never share a key, even with a business key.
With `source_scope="shared"` the material is the key alone, so the same key from any source
runs once. With `source_scope="powertools"` it is what Powertools' ``BatchProcessor`` with an
``@idempotent_function(data_keyword_argument=...)`` record handler hashes: the key alone, or
the whole raw record when `event_key_jmespath` is empty, so the records Powertools stored
replay (in Powertools' record format, which that scope requires). Missing key material stays
missing (it is never wrapped), so `raise_on_no_idempotency_key` decides as for any other
payload.

`BATCH_SOURCES` is the registry: the modules that each declare one source as ``SOURCE``. The
CLI's list of decorators and its `key` dry run read them from there, so adding a source is one
module and one line in it.
"""

from __future__ import annotations

import base64
import binascii
import datetime
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from idempotent_lambda._identity import is_missing
from idempotent_lambda.adapters._batch_lanes import PartialBatchResponse, partial_response
from idempotent_lambda.config import IdempotencyConfig
from idempotent_lambda.exceptions import (
    IdempotencyConfigError,
    MalformedEventError,
    MalformedRecordError,
)

__all__ = [
    "BATCH_SOURCES",
    "SOURCE_SCOPES",
    "BatchSource",
    "Probe",
    "at",
    "base64_field",
    "check_source_scope",
    "records_list",
    "records_one_by_one",
    "time_field",
]

RecordT = TypeVar("RecordT")
Raw = Mapping[str, Any]

#: The values of ``source_scope``: keys per source (the default), one key space for all, or the
#: keys Powertools' per-record ``idempotent_function`` stored (see the module).
SOURCE_SCOPES = ("source", "shared", "powertools")

#: The modules under `idempotent_lambda.adapters` that each declare one batch source as
#: ``SOURCE``, in the order the CLI lists them.
BATCH_SOURCES = ("sqs", "dynamodb_stream", "kinesis", "kafka")

Probe = tuple[tuple[str | int, ...], str]
"""A field an event may lack (its path), and a value of the right shape to stand in for it."""
#: Where a ``Records`` event names a record's source; the stand-in has the shape of a stream
#: ARN, which every such source reads.
_RECORD_ARN: Probe = (
    ("Records", 0, "eventSourceARN"),
    "arn:aws:dynamodb:us-east-1:000000000000:table/probe/stream/probe",
)


def at(*path: str) -> Callable[[Raw], Any]:
    """Return a reader of the value at ``path`` in a raw record; None where a step is missing."""

    def read(raw: Raw) -> Any:
        value: Any = raw
        for name in path:
            if not isinstance(value, Mapping):
                return None
            value = value.get(name)
        return value

    return read


def records_list(event: Any, source: str) -> list[Any]:
    """Return the event's ``Records`` list.

    Raises:
        MalformedEventError: The event is not a mapping with a ``Records`` list.
    """
    if not isinstance(event, Mapping):
        found = f"a {type(event).__name__}"
    else:
        records = event.get("Records")
        if isinstance(records, list):
            return records
        found = "no Records" if records is None else f"Records of type {type(records).__name__}"
    raise MalformedEventError(
        f"a {source} batch handler needs an event with a Records list, got {found}"
    )


def check_source_scope(source_scope: object, config: IdempotencyConfig) -> str:
    """Return ``source_scope`` once it is known to be usable with ``config``.

    Raises:
        IdempotencyConfigError: It is not one of `SOURCE_SCOPES`, or it is ``"powertools"``
            and the config's record format is not Powertools' (whose keys it computes).
    """
    if not isinstance(source_scope, str) or source_scope not in SOURCE_SCOPES:
        raise IdempotencyConfigError('source_scope must be "source", "shared" or "powertools"')
    if source_scope == "powertools" and config.record_format != "powertools":
        raise IdempotencyConfigError(
            'source_scope="powertools" computes the keys Powertools stored: it needs '
            'record_format="powertools" (the default)'
        )
    return source_scope


def base64_field(value: object, what: str) -> bytes | None:
    """Decode a record's base64 field; None stays None.

    Raises:
        MalformedRecordError: ``what`` (say "Kafka record whose key") is not base64 text.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise MalformedRecordError(f"{what} is not base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MalformedRecordError(f"{what} is not base64") from exc


def time_field(value: object, what: str, *, per_second: int = 1) -> datetime.datetime | None:
    """Turn a record's epoch time (``per_second`` units a second) into UTC; None stays None.

    Raises:
        MalformedRecordError: ``what`` is not a number, or not a time.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedRecordError(f"{what} is not a number")
    try:
        return datetime.datetime.fromtimestamp(value / per_second, tz=datetime.timezone.utc)
    except (OverflowError, OSError, ValueError) as exc:
        raise MalformedRecordError(f"{what} is not a possible time") from exc


def _independent(raw: Raw) -> Hashable | None:
    return None


def _no_carrier(raw: Raw) -> Any:
    return None


def records_one_by_one(event: Any) -> list[tuple[dict[str, Any], Any]]:
    """Cut a ``Records`` event into one event per record, each with its raw record."""
    records = event.get("Records") if isinstance(event, Mapping) else None
    if not isinstance(records, list):
        return []
    return [({**event, "Records": [raw]}, raw) for raw in records]


def _record_arn(event: Any, raw: Raw) -> object:
    return raw.get("eventSourceARN")


@dataclass(frozen=True, slots=True)
class BatchSource(Generic[RecordT]):
    """What sets one event source apart from another: all a new batch adapter declares.

    Attributes:
        name: Source name in log lines (``"sqs"``, ``"kinesis"``).
        decorator: The public decorator's name (``"idempotent_sqs_handler"``).
        parse: Raw record -> the typed record the handler receives; raises `MalformedRecordError`.
        identifier: Raw record -> its identifier, a non-empty string; a record without one
            cannot be reported alone, so its batch is reported failed whole.
        default_key: Raw record -> key material when ``event_key_jmespath`` is empty.
        scope: ``(event, raw record)`` -> the source the key is scoped to (see the module).
        chain: Raw record -> its chain (records that run in order, and stop at a failure);
            None: independent.
        checkpoint: Lambda resumes from the lowest failed record (a stream): every record from
            the first failure on is reported, and a record whose chain is None puts the whole
            batch in one chain.
        first_delivery: Raw record -> True when it is surely delivered for the first time; a
            batch of such records skips the up-front read. None: always read.
        records: ``(event, name)`` -> the raw records; raises `MalformedEventError`.
        report_as: Raw record -> its ``itemIdentifier`` in the answer; None: the identifier.
        carrier: Raw record -> what may carry an outbox event's trace context: the event, or
            its JSON text (`idempotent_lambda._tracing.event_parent`); None: nothing does.
        event_shape: What the event is, for the error when an event is not one.
        scope_field: Where the event names a record's source (its key includes it).
        one_by_one: Event -> one event per record, each with its raw record; empty when the
            event holds no records (the CLI's ``key`` dry run runs each alone).
        scope_probes: Event -> the fields naming the source, each with a stand-in value.
    """

    name: str
    decorator: str
    parse: Callable[[Raw], RecordT]
    identifier: Callable[[Raw], object]
    default_key: Callable[[Raw], Any]
    scope: Callable[[Any, Raw], object] = _record_arn
    chain: Callable[[Raw], Hashable | None] = _independent
    checkpoint: bool = False
    first_delivery: Callable[[Raw], bool] | None = None
    records: Callable[[Any, str], list[Any]] = records_list
    report_as: Callable[[Raw], Any] | None = None
    carrier: Callable[[Raw], Any] = _no_carrier
    event_shape: str = "an object with a non-empty Records list"
    scope_field: str = "the record's eventSourceARN"
    one_by_one: Callable[[Any], list[tuple[dict[str, Any], Any]]] = records_one_by_one
    scope_probes: Callable[[Any], list[Probe]] = lambda event: [_RECORD_ARN]

    def identify(self, raw: object) -> str | None:
        """Return a raw record's identifier; None when it has none."""
        found = self.identifier(raw) if isinstance(raw, Mapping) else None
        return found if isinstance(found, str) and found else None

    def chains(self, records: list[Raw]) -> list[Hashable | None]:
        """Return each record's chain."""
        chains = [self.chain(raw) for raw in records]
        if self.checkpoint and None in chains:
            return ["batch"] * len(records)  # nothing is known of what it orders against
        return chains

    def key_material(
        self, event: Any, raw: Raw, config: IdempotencyConfig, *, scope: str = "source"
    ) -> tuple[Any, Any]:
        """Return a raw record's key material and validation material, as its handler hashes them.

        Args:
            event: The batch event the record came in.
            raw: The record as Lambda delivered it.
            config: The handler's settings (``event_key_jmespath``, validation).
            scope: The ``source_scope`` (see the module).

        Raises:
            IdempotencyKeyError: An expression failed on the record.
        """
        extracted = config.extract(raw)
        if config.event_key_jmespath:
            key = extracted.key
        else:
            key = raw if scope == "powertools" else self.default_key(raw)
        if scope == "source" and not is_missing(key):
            key = {"source": self.scope(event, raw), "key": key}
        return key, extracted.validation

    def answer(self, records: list[Any], failed: list[str]) -> PartialBatchResponse:
        """Return the partial batch response that asks Lambda to retry the ``failed`` records."""
        if self.report_as is None:
            return partial_response(failed)
        by_identifier = {self.identify(raw): raw for raw in records}
        items = [{"itemIdentifier": self.report_as(by_identifier[i])} for i in failed]
        return cast(PartialBatchResponse, {"batchItemFailures": items})
