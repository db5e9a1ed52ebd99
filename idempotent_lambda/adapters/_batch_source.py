"""What sets one batch event source apart from another: the `BatchSource` the adapters fill in.

Its own module so that both the batch loop (`_batch`) and one record's run (`_batch_records`)
can import it without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

RecordT = TypeVar("RecordT")

#: A plan: the lanes (record indexes to run in order) and whether a failure stops the batch.
Plan = tuple[list[list[int]], bool]


@dataclass(frozen=True, slots=True)
class BatchSource(Generic[RecordT]):
    """What sets one event source apart from another.

    Attributes:
        name: Source name in log lines (``"sqs"``, ``"dynamodb_stream"``).
        identify: Raw record -> its ``itemIdentifier``; None when it has none.
        parse: Raw record -> typed record; raises `MalformedRecordError`.
        default_key: Raw record -> key material when ``event_key_jmespath`` is empty.
        plan: Raw records (all mappings) and ``max_concurrency`` -> the batch's `Plan`.
    """

    name: str
    identify: Callable[[Any], str | None]
    parse: Callable[[Mapping[str, Any]], RecordT]
    default_key: Callable[[Mapping[str, Any]], Any]
    plan: Callable[[Sequence[Mapping[str, Any]], int], Plan]
