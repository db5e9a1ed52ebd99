"""What the batch adapter modules share: the public names they re-export, and their decorator.

Each of the SQS, stream and Kinesis modules re-exports `__all__` (``from ... import *`` and
``__all__ +=``, forms type checkers read as re-exports), so ``from
idempotent_lambda.adapters.sqs import PartialBatchResponse`` and the like keep working. Kafka
answers with types of its own and lists all its names itself.

Each public decorator spells its options in its own signature (``help()`` and the reference
read them there) and hands them, as they came, to `batch_adapter`, where they are checked once.
"""

from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from idempotent_lambda._setup import exposing
from idempotent_lambda.adapters._batch import (
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_TIME_SAFETY_MARGIN_MS,
    BatchHandler,
    BatchItemFailure,
    BatchOptions,
    PartialBatchResponse,
    batch_decorator,
)
from idempotent_lambda.adapters._batch_source import BatchSource
from idempotent_lambda.exceptions import MalformedEventError, MalformedRecordError

__all__ = [
    "DEFAULT_MAX_CONCURRENCY",
    "DEFAULT_TIME_SAFETY_MARGIN_MS",
    "BatchItemFailure",
    "BatchOptions",
    "MalformedEventError",
    "MalformedRecordError",
    "PartialBatchResponse",
]

RecordT = TypeVar("RecordT")


def batch_adapter(
    source: BatchSource[RecordT], options: Mapping[str, Any]
) -> Callable[[Callable[[RecordT, Any], object]], BatchHandler]:
    """Return the decorator a public batch decorator returns, given its keyword arguments.

    Args:
        source: The adapter's event source.
        options: The decorator's parameters by name (its `BatchOptions`).

    Raises:
        IdempotencyConfigError: An option is unusable (at decoration time).
    """
    checked = cast(BatchOptions, dict(options))
    return exposing(source.decorator, checked, batch_decorator(source, **checked))
