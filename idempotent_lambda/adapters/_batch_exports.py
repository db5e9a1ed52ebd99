"""The public names the SQS, stream and Kinesis adapter modules share, listed once.

Each of those modules re-exports them (``from ... import *`` and ``__all__ +=``, forms type
checkers read as re-exports), so ``from idempotent_lambda.adapters.sqs import
PartialBatchResponse`` and the like keep working. A name a module also uses itself
(`BatchOptions`, `MalformedRecordError`, the defaults of its signature) it imports and lists on
its own, since an explicit
import hides a name from the star import's re-export. Kafka answers with types of its own and
lists all its names itself.
"""

from idempotent_lambda.adapters._batch import BatchItemFailure, PartialBatchResponse
from idempotent_lambda.exceptions import MalformedEventError

__all__ = [
    "BatchItemFailure",
    "MalformedEventError",
    "PartialBatchResponse",
]
