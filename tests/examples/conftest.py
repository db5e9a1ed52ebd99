"""The Redis example's fixtures: the session's real ``redis-server`` (skips when it is missing)."""

from tests.integration._redis_server import redis_client, redis_port  # noqa: F401 - fixtures
