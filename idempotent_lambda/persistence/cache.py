"""Powertools' newer names for the Redis/Valkey store, at Powertools' module path.

`CachePersistenceLayer` is `RedisCachePersistenceLayer` under the name Powertools now documents;
it takes a redis-py or valkey-py client, valkey-glide's synchronous client (package
``valkey-glide-sync``), or the coroutine valkey-glide's asyncio ``GlideClient.create`` returns.
"""

from __future__ import annotations

from idempotent_lambda.persistence.redis import (
    CacheClientProtocol,
    CacheConnection,
    CachePersistenceLayer,
    GlideClientProtocol,
)

__all__ = [
    "CacheClientProtocol",
    "CacheConnection",
    "CachePersistenceLayer",
    "GlideClientProtocol",
]
