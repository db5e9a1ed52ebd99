"""What sets one batch event source apart from another: the `BatchSource` the adapters fill in.

Its own module so that both the batch loop (`_batch`) and one record's run (`_batch_records`)
can import it without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

RecordT = TypeVar("RecordT")


@dataclass(frozen=True, slots=True)
class BatchSource(Generic[RecordT]):
    """What sets one event source apart from another.

    Attributes:
        name: Source name in log lines (``"sqs"``, ``"dynamodb_stream"``).
        identify: Raw record -> its ``itemIdentifier``; None when it has none.
        parse: Raw record -> typed record; raises `MalformedRecordError`.
        default_key: Raw record -> key material when ``event_key_jmespath`` is empty.
        chains: Raw records (all mappings) -> the *chain* of each: records of one chain run in
            batch order, and once one fails the rest of its chain is reported without running
            (a FIFO message group, a stream item). None: the record is independent.
        checkpoint: True when Lambda resumes the whole batch from its lowest failed record (a
            stream), so every record from the first failure on is reported.
        may_be_redelivered: Raw records -> whether any of them may have been delivered before;
            False lets the batch skip reading its keys up front.
    """

    name: str
    identify: Callable[[Any], str | None]
    parse: Callable[[Mapping[str, Any]], RecordT]
    default_key: Callable[[Mapping[str, Any]], Any]
    chains: Callable[[Sequence[Mapping[str, Any]]], list[Hashable | None]]
    checkpoint: bool
    may_be_redelivered: Callable[[Sequence[Mapping[str, Any]]], bool]
