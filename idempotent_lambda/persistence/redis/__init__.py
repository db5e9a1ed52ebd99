"""A store on Redis or Valkey, at Powertools' module path and with Powertools' names.

redis-py is an optional dependency (`pip install 'idempotent-lambda[redis]'`), imported only
when the store builds its own client. The Redis guide describes the formats and the clients.
"""

from idempotent_lambda.exceptions import (
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
    IdempotencyPersistenceConfigError,
    IdempotencyPersistenceConnectionError,
    IdempotencyPersistenceConsistencyError,
)
from idempotent_lambda.persistence._powertools_layer import BasePersistenceLayer
from idempotent_lambda.persistence.datarecord import STATUS_CONSTANTS, DataRecord
from idempotent_lambda.persistence.redis._store import (
    DEFAULT_TTL_GRACE_SECONDS as DEFAULT_TTL_GRACE_SECONDS,
)
from idempotent_lambda.persistence.redis._store import (
    CacheClientProtocol,
    CacheConnection,
    CachePersistenceLayer,
    RedisCachePersistenceLayer,
    RedisClientProtocol,
    RedisConnection,
)
from idempotent_lambda.persistence.redis._store import (
    GlideClientProtocol as GlideClientProtocol,
)

# Powertools' module holds these names too, so a literal import swap finds them here.
__all__ = [
    "STATUS_CONSTANTS",
    "BasePersistenceLayer",
    "CacheClientProtocol",
    "CacheConnection",
    "CachePersistenceLayer",
    "DataRecord",
    "IdempotencyItemAlreadyExistsError",
    "IdempotencyItemNotFoundError",
    "IdempotencyPersistenceConfigError",
    "IdempotencyPersistenceConnectionError",
    "IdempotencyPersistenceConsistencyError",
    "RedisCachePersistenceLayer",
    "RedisClientProtocol",
    "RedisConnection",
]
